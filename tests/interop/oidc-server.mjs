#!/usr/bin/env node
// Independent OpenID Provider for mcp-connect interop tests, built on the OpenID-certified
// `oidc-provider` package (panva). One process = one provider on 127.0.0.1.
//
// Configuration: a single JSON argument (`node oidc-server.mjs '{"port":0}'`) or the
// OIDC_CONFIG environment variable (JSON). The argument wins. See README.md.
//
// stdout carries exactly one line, `{"ready":true,"issuer":"...","port":N}`, once the server
// listens; everything else goes to stderr.

import { randomBytes, generateKeyPairSync } from 'node:crypto';
import http from 'node:http';
import process from 'node:process';

import Provider, { errors, interactionPolicy } from 'oidc-provider';
// oidc-provider's own in-memory adapter; its storage is module-level, so sessions, grants and
// tokens survive the Provider rebuilds done by the admin endpoints. Bigger than the default
// 1000 entries so that long test runs do not evict live sessions.
import MemoryAdapter, { setStorage } from 'oidc-provider/lib/adapters/memory_adapter.js';
import QuickLRU from 'quick-lru';

setStorage(new QuickLRU({ maxSize: 100000 }));

// ---------------------------------------------------------------------------------------------
// configuration

function fail(msg) {
  process.stderr.write(`oidc-server: ${msg}\n`);
  process.exit(2);
}

function readConfig() {
  const raw = process.argv[2] ?? process.env.OIDC_CONFIG ?? '{}';
  let cfg;
  try {
    cfg = JSON.parse(raw);
  } catch (err) {
    fail(`configuration is not valid JSON: ${err.message}`);
  }
  if (cfg === null || typeof cfg !== 'object' || Array.isArray(cfg)) fail('configuration must be a JSON object');
  return cfg;
}

const ALGS = new Set(['RS256', 'PS256', 'ES256']);

const cfg = readConfig();
const KNOWN = new Set(['port', 'issuer_path', 'alg', 'clients', 'access_ttl', 'refresh_ttl', 'id_token_ttl',
  'rotate_refresh_tokens', 'issue_refresh_tokens', 'expires_with_session', 'logout_confirm',
  'exit_on_stdin_close', 'log', 'mcp_resource', 'cimd', 'workload_resource']);
for (const k of Object.keys(cfg)) if (!KNOWN.has(k)) fail(`unknown configuration field "${k}"`);
const settings = {
  port: cfg.port ?? 0,
  issuerPath: cfg.issuer_path ?? null,
  alg: cfg.alg ?? 'RS256',
  accessTtl: cfg.access_ttl ?? 3600,
  refreshTtl: cfg.refresh_ttl ?? 14 * 24 * 3600,
  idTokenTtl: cfg.id_token_ttl ?? 3600,
  rotateRefreshTokens: cfg.rotate_refresh_tokens ?? true,
  issueRefreshTokens: cfg.issue_refresh_tokens ?? true,
  expiresWithSession: cfg.expires_with_session ?? false,
  logoutConfirm: cfg.logout_confirm ?? false,
  exitOnStdinClose: cfg.exit_on_stdin_close ?? true,
  log: cfg.log ?? (process.env.OIDC_LOG === '1'),
  // Also a remote MCP server's authorization server: `/mcp` is a protected resource whose
  // 401 names its RFC 9728 metadata; its tokens are JWTs for it (RFC 8707 resource
  // indicators), and clients register themselves (RFC 7591).
  mcpResource: cfg.mcp_resource ?? false,
  // Client ID Metadata Documents: a client id that is an http(s) URL is looked up by
  // fetching that URL (the document's `client_id` must be the URL), and discovery says so.
  cimd: cfg.cimd ?? false,
  // A resource (an absolute URL) for which clients with the client_credentials grant get
  // RFC 9068 JWT access tokens: the workload tokens of mcp-connect's callers (issue 44).
  workloadResource: cfg.workload_resource ?? null,
};
const WORKLOAD_SCOPE = 'mcp-connect';
const MCP_SCOPE = 'mcp:tools';
const mcpResourceUrl = () => `${issuer.replace(/\/+$/, '').replace(mountPath, '')}/mcp`;

if (!Number.isInteger(settings.port) || settings.port < 0 || settings.port > 65535) fail('port must be an integer 0..65535');
if (!ALGS.has(settings.alg)) fail(`alg must be one of ${[...ALGS].join(', ')}`);
if (settings.issuerPath !== null && (typeof settings.issuerPath !== 'string' || !settings.issuerPath.startsWith('/'))) {
  fail('issuer_path must be a string starting with "/"');
}
for (const k of ['accessTtl', 'refreshTtl', 'idTokenTtl']) {
  if (!Number.isInteger(settings[k]) || settings[k] <= 0) fail(`${k} must be a positive integer (seconds)`);
}

// The provider is mounted under the issuer's path without its trailing slash ("/realm/" and
// "/realm" both mount at "/realm"; "/" mounts at the root).
const mountPath = settings.issuerPath ? settings.issuerPath.replace(/\/+$/, '') : '';

// A client registered for private_key_jwt (RFC 7523) has no secret but a `jwks_uri` or
// `jwks`, as oidc-provider itself requires.
const usesKeys = (c) => c.token_endpoint_auth_method === 'private_key_jwt';

function normalizeClient(c) {
  if (!c || typeof c.client_id !== 'string' || !c.client_id) fail('every client needs a client_id');
  if (usesKeys(c)) {
    if (!c.jwks_uri === !c.jwks) fail(`client ${c.client_id} (private_key_jwt) needs jwks_uri or jwks`);
  } else if (typeof c.client_secret !== 'string' || !c.client_secret) fail(`client ${c.client_id} needs a client_secret`);
  // A client of the client_credentials grant only redirects nowhere.
  const machine = Array.isArray(c.grant_types) && c.grant_types.length === 1 && c.grant_types[0] === 'client_credentials';
  if (machine) return { response_types: [], redirect_uris: [], ...c };
  if (!Array.isArray(c.redirect_uris) || !c.redirect_uris.length) fail(`client ${c.client_id} needs redirect_uris`);
  return { ...c };
}

let clients = (cfg.clients ?? [{
  client_id: 'test-client',
  client_secret: 'test-secret',
  redirect_uris: ['http://127.0.0.1/callback'],
}]).map(normalizeClient);

// ---------------------------------------------------------------------------------------------
// keys

let keyCounter = 0;

function generateSigningKey(alg) {
  keyCounter += 1;
  const kid = `${alg.toLowerCase()}-${keyCounter}-${randomBytes(6).toString('base64url')}`;
  const { privateKey } = alg === 'ES256'
    ? generateKeyPairSync('ec', { namedCurve: 'P-256' })
    : generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid, alg, use: 'sig' };
}

// First key signs (oidc-provider picks the first matching key).
let keys = [generateSigningKey(settings.alg)];

// ---------------------------------------------------------------------------------------------
// stats

function freshStats() {
  return {
    provider_builds: 0,
    key_rotations: 0,
    authorization_requests: 0,
    logins: 0,
    last_login: null,
    token_requests: { total: 0, by_grant_type: {}, errors: {}, error_details: {} },
    client_auth: {}, // endpoint -> { client_secret_basic, client_secret_post, none }
    refresh_token_rotations: 0,
    refresh_token_reuse_detected: 0,
    revocations: { requests: 0, ok: 0, access_token: 0, refresh_token: 0, not_found: 0 },
    introspections: { requests: 0, active: 0, inactive: 0 },
    userinfo_requests: { total: 0, ok: 0 },
    // The remote MCP server's side: probes of /mcp, metadata reads, registrations, and the
    // `resource` of each authorization and token request (null: none sent).
    mcp: { probes: 0, metadata_requests: 0, registrations: 0, cimd_fetches: 0, authorize_resources: [], token_resources: [] },
    end_session: { requests: 0, confirmed: 0 },
  };
}
let stats = freshStats();
const inc = (obj, key, n = 1) => { obj[key] = (obj[key] ?? 0) + n; };

function clientAuthMethod(ctx) {
  if (ctx.oidc?.params?.client_assertion) return 'private_key_jwt';
  if (ctx.get('authorization')) return 'client_secret_basic';
  if (ctx.oidc?.params?.client_secret) return 'client_secret_post';
  return 'none';
}

async function statsMiddleware(ctx, next) {
  await next();
  const route = ctx.oidc?.route;
  if (!route) return;
  const body = ctx.body && typeof ctx.body === 'object' ? ctx.body : {};
  switch (route) {
    case 'authorization':
      stats.authorization_requests += 1;
      stats.mcp.authorize_resources.push(ctx.oidc.params?.resource ?? null);
      break;
    case 'registration':
      if (ctx.status === 201) stats.mcp.registrations += 1;
      break;
    case 'token': {
      const gt = ctx.oidc.params?.grant_type ?? '(none)';
      stats.token_requests.total += 1;
      stats.mcp.token_resources.push({ grant_type: gt, resource: ctx.oidc.params?.resource ?? null });
      inc(stats.token_requests.by_grant_type, gt);
      stats.client_auth.token ??= {};
      inc(stats.client_auth.token, clientAuthMethod(ctx));
      if (ctx.status >= 400 && body.error) {
        inc(stats.token_requests.errors, body.error);
      } else if (ctx.oidc.entities?.RotatedRefreshToken) {
        stats.refresh_token_rotations += 1;
      }
      break;
    }
    case 'revocation': {
      stats.revocations.requests += 1;
      stats.client_auth.revocation ??= {};
      inc(stats.client_auth.revocation, clientAuthMethod(ctx));
      if (ctx.status === 200) {
        stats.revocations.ok += 1;
        const e = ctx.oidc.entities ?? {};
        if (e.AccessToken) stats.revocations.access_token += 1;
        else if (e.RefreshToken) stats.revocations.refresh_token += 1;
        else stats.revocations.not_found += 1;
      }
      break;
    }
    case 'introspection':
      stats.introspections.requests += 1;
      stats.client_auth.introspection ??= {};
      inc(stats.client_auth.introspection, clientAuthMethod(ctx));
      if (ctx.status === 200) {
        if (body.active) stats.introspections.active += 1;
        else stats.introspections.inactive += 1;
      }
      break;
    case 'userinfo':
      stats.userinfo_requests.total += 1;
      if (ctx.status === 200) stats.userinfo_requests.ok += 1;
      break;
    case 'end_session':
      stats.end_session.requests += 1;
      break;
    case 'end_session_confirm':
      if (ctx.status === 303) stats.end_session.confirmed += 1;
      break;
    default:
  }
}

// ---------------------------------------------------------------------------------------------
// HTML

const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({
  '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
}[c]));

const page = (title, body) => `<!DOCTYPE html>
<html>
<head><meta charset="utf-8"><title>${esc(title)}</title></head>
<body>
${body}
</body>
</html>`;

// Field and button names follow the repository's dev providers (crates/devproviders):
// input[name=username], button[name=decision][value=allow|deny].
function loginPage({ uid, prompt, reasons, loginHint, error }) {
  const action = `${mountPath}/interaction/${encodeURIComponent(uid)}/login`;
  return page('Sign-in', `<h1 id="login-title">Sign-in</h1>
<p id="prompt" data-prompt="${esc(prompt)}" data-reasons="${esc(reasons.join(' '))}">prompt: ${esc(prompt)} (${esc(reasons.join(', '))})</p>
${error ? `<p id="login-error">${esc(error)}</p>` : ''}
<form id="login-form" method="post" action="${esc(action)}" autocomplete="off">
  <label for="username">Username</label>
  <input id="username" name="username" type="text" value="${esc(loginHint ?? '')}" autofocus required>
  <button id="submit" type="submit" name="decision" value="allow">Sign in</button>
  <button id="abort" type="submit" name="decision" value="deny" formnovalidate>Cancel</button>
</form>`);
}

// ---------------------------------------------------------------------------------------------
// Client ID Metadata Documents (as the MCP authorization spec describes them)

class MetadataDocumentClients extends MemoryAdapter {
  async find(id) {
    const known = await super.find(id);
    if (known || !/^https?:\/\//.test(id)) return known;
    const r = await fetch(id, { headers: { accept: 'application/json' }, redirect: 'error' });
    if (!r.ok) return undefined;
    const doc = await r.json();
    if (doc.client_id !== id || !Array.isArray(doc.redirect_uris)) return undefined;
    stats.mcp.cimd_fetches += 1;
    return {
      client_id: id,
      client_name: doc.client_name,
      redirect_uris: doc.redirect_uris,
      grant_types: doc.grant_types ?? ['authorization_code'],
      response_types: doc.response_types ?? ['code'],
      token_endpoint_auth_method: 'none',
    };
  }
}

// ---------------------------------------------------------------------------------------------
// provider

let issuer; // set once the port is known
let provider; // current Provider instance; replaced on key rotation / admin changes
let handler; // provider.callback()
const cookieKeys = [randomBytes(32).toString('hex')];

function buildPolicy() {
  const policy = interactionPolicy.base();
  // prompt=select_account: re-show the login form even when a session exists. The prompt is
  // resolved by the login form submission (see /interaction/:uid/login).
  policy.add(new interactionPolicy.Prompt({ name: 'select_account', requestable: true }), 0);
  return policy;
}

function algsInUse() {
  return [...new Set(keys.map((k) => k.alg))];
}

function buildProvider() {
  const algs = algsInUse();
  const configuration = {
    clients: clients.map((c) => ({
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic', // client_secret_post is accepted too
      id_token_signed_response_alg: settings.alg,
      post_logout_redirect_uris: [],
      ...c,
    })),
    clientDefaults: {
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: settings.alg,
    },
    // A factory, which also silences the dev warning.
    adapter: (name) => (name === 'Client' && settings.cimd ? new MetadataDocumentClients(name) : new MemoryAdapter(name)),
    discovery: settings.cimd ? { client_id_metadata_document_supported: true } : {},
    jwks: { keys },
    responseTypes: ['code'],
    // `none`: the public clients of client ID metadata documents (PKCE is required anyway).
    clientAuthMethods: ['client_secret_basic', 'client_secret_post', 'private_key_jwt', ...(settings.cimd ? ['none'] : [])],
    enabledJWA: { idTokenSigningAlgValues: algs },
    cookies: {
      keys: cookieKeys,
      // loopback http: no `secure`; SameSite=None without Secure is rejected by Chromium, so lax.
      long: { httpOnly: true, sameSite: 'lax' },
      short: { httpOnly: true, sameSite: 'lax' },
    },
    claims: {
      openid: ['sub', 'preferred_username', 'name'],
      profile: ['preferred_username', 'name'],
      email: ['email', 'email_verified'],
    },
    conformIdTokenClaims: false, // claims of granted scopes also go into the ID token
    async findAccount(ctx, sub) {
      return {
        accountId: sub,
        async claims() {
          return {
            sub,
            preferred_username: sub,
            name: `User ${sub}`,
            email: `${sub}@example.test`,
            email_verified: true,
          };
        },
      };
    },
    // Consent is implicit: every requested scope/claim is granted to every client.
    async loadExistingGrant(ctx) {
      const { oidc } = ctx;
      const accountId = oidc.account?.accountId ?? oidc.session.accountId;
      const clientId = oidc.client.clientId;
      const grantId = oidc.result?.consent?.grantId || oidc.session.grantIdFor(clientId);
      let grant = grantId ? await oidc.provider.Grant.find(grantId) : undefined;
      if (!grant || grant.accountId !== accountId || grant.clientId !== clientId) {
        grant = new oidc.provider.Grant({ accountId, clientId });
      }
      const scope = [...oidc.requestParamOIDCScopes].join(' ');
      if (scope) grant.addOIDCScope(scope);
      const resource = oidc.params?.resource;
      if (settings.mcpResource && resource === mcpResourceUrl()) grant.addResourceScope(resource, MCP_SCOPE);
      const claims = [...oidc.requestParamClaims];
      if (claims.length) grant.addOIDCClaims(claims);
      await grant.save();
      return grant;
    },
    interactions: {
      policy: buildPolicy(),
      url: (ctx, interaction) => `${mountPath}/interaction/${interaction.uid}`,
    },
    features: {
      devInteractions: { enabled: false },
      // Off: opaque access tokens, usable at userinfo. On (mcp_resource): JWTs for /mcp,
      // and only when the request names it (a refresh without `resource` gets none).
      resourceIndicators: (settings.mcpResource || settings.workloadResource) ? {
        enabled: true,
        defaultResource: () => undefined,
        useGrantedResource: () => false,
        getResourceServerInfo: (ctx, indicator) => {
          if (settings.workloadResource && indicator === settings.workloadResource) {
            return { scope: WORKLOAD_SCOPE, audience: indicator, accessTokenFormat: 'jwt', accessTokenTTL: settings.accessTtl };
          }
          if (!settings.mcpResource || indicator !== mcpResourceUrl()) throw new errors.InvalidTarget();
          return { scope: MCP_SCOPE, audience: indicator, accessTokenFormat: 'jwt', accessTokenTTL: settings.accessTtl };
        },
      } : { enabled: false },
      registration: { enabled: settings.mcpResource },
      clientCredentials: { enabled: !!settings.workloadResource },
      revocation: { enabled: true },
      introspection: { enabled: true },
      userinfo: { enabled: true },
      rpInitiatedLogout: {
        enabled: true,
        async logoutSource(ctx, form) {
          ctx.body = page('Sign-out', `<h1 id="logout-title">Sign out of ${esc(ctx.host)}?</h1>
${form}
<button id="logout-yes" type="submit" form="op.logoutForm" name="logout" value="yes">Yes, sign me out</button>
<button id="logout-no" type="submit" form="op.logoutForm">No, stay signed in</button>
${settings.logoutConfirm ? '' : '<script>document.getElementById("logout-yes").click();</script>'}`);
        },
        async postLogoutSuccessSource(ctx) {
          ctx.body = page('Signed out', '<h1 id="logout-success">Signed out</h1>');
        },
      },
    },
    pkce: { methods: ['S256'], required: () => true },
    issueRefreshToken: async (ctx, client) => settings.issueRefreshTokens && client.grantTypeAllowed('refresh_token'),
    rotateRefreshToken: () => settings.rotateRefreshTokens,
    expiresWithSession: async () => settings.expiresWithSession,
    ttl: {
      AccessToken: settings.accessTtl,
      AuthorizationCode: 60,
      IdToken: settings.idTokenTtl,
      RefreshToken: settings.refreshTtl,
      Grant: settings.refreshTtl,
      Session: 14 * 24 * 3600,
      Interaction: 3600,
    },
    clientBasedCORS: () => true,
    async renderError(ctx, out) {
      ctx.type = 'html';
      ctx.body = page('Error', `<h1 id="error-title">Error</h1>
<p id="error" data-error="${esc(out.error)}">${esc(out.error)}</p>
<p id="error-description">${esc(out.error_description)}</p>`);
    },
  };

  const p = new Provider(issuer, configuration);
  p.use(statsMiddleware);
  // the token endpoint answers a generic "grant request is invalid"; the reason is in error_detail
  p.on('grant.error', (ctx, err) => {
    if (err?.error_detail) inc(stats.token_requests.error_details, err.error_detail);
    if (err?.error_detail === 'refresh token already used') stats.refresh_token_reuse_detected += 1;
  });
  p.on('server_error', (ctx, err) => process.stderr.write(`oidc-server: server_error ${err?.stack ?? err}\n`));
  provider = p;
  handler = p.callback();
  stats.provider_builds += 1;
}

// oidc-provider validates static clients lazily (on first use); do it now so that a bad client
// fails start-up / the admin call instead of the first authorization request.
async function validateClients() {
  for (const c of clients) {
    let found;
    try {
      found = await provider.Client.find(c.client_id);
    } catch (err) {
      throw new Error(`client ${c.client_id}: ${err.error_description ?? err.message}`);
    }
    if (!found) throw new Error(`client ${c.client_id} is invalid`);
  }
}

async function rebuildOrRollback(rollback) {
  try {
    buildProvider();
    await validateClients();
    return null;
  } catch (err) {
    rollback();
    buildProvider();
    return err;
  }
}

// ---------------------------------------------------------------------------------------------
// interaction routes (login form, implicit consent)

function readBody(req, limit = 1 << 20) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > limit) { reject(new Error('body too large')); req.destroy(); return; }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function send(res, status, body, type = 'text/html; charset=utf-8', headers = {}) {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store', ...headers });
  res.end(body);
}

const sendJson = (res, status, obj) => send(res, status, `${JSON.stringify(obj)}\n`, 'application/json');

function redirect(res, location) {
  res.writeHead(303, { location, 'cache-control': 'no-store', 'content-length': '0' });
  res.end();
}

async function interaction(req, res, rest) {
  const p = provider;
  const m = /^\/interaction\/([^/]+)(\/login|\/abort)?$/.exec(rest);
  if (!m) return send(res, 404, page('Not found', '<p id="error">not found</p>'));
  const uid = decodeURIComponent(m[1]);
  const action = m[2];

  let details;
  try {
    details = await p.interactionDetails(req, res);
  } catch (err) {
    return send(res, 400, page('Error', `<p id="error" data-error="invalid_request">${esc(err.message)}</p>`));
  }
  if (details.uid !== uid) {
    return send(res, 400, page('Error', '<p id="error" data-error="invalid_request">interaction mismatch</p>'));
  }
  const { prompt, params } = details;

  if (action === '/abort') {
    if (req.method !== 'POST' && req.method !== 'GET') return send(res, 405, 'method not allowed', 'text/plain');
    const to = await p.interactionResult(req, res, {
      error: 'access_denied', error_description: 'End-User aborted interaction',
    }, { mergeWithLastSubmission: false });
    return redirect(res, to);
  }

  if (action === '/login') {
    if (req.method !== 'POST') return send(res, 405, 'method not allowed', 'text/plain');
    if (prompt.name !== 'login' && prompt.name !== 'select_account') {
      return send(res, 400, page('Error', '<p id="error" data-error="invalid_request">no login pending</p>'));
    }
    const form = new URLSearchParams(await readBody(req));
    if (form.get('decision') === 'deny') {
      const to = await p.interactionResult(req, res, {
        error: 'access_denied', error_description: 'End-User aborted interaction',
      }, { mergeWithLastSubmission: false });
      return redirect(res, to);
    }
    const login = (form.get('username') ?? form.get('login') ?? '').trim();
    if (!login) {
      return send(res, 400, loginPage({
        uid, prompt: prompt.name, reasons: prompt.reasons, loginHint: '', error: 'a login name is required',
      }));
    }
    stats.logins += 1;
    stats.last_login = login;
    const to = await p.interactionResult(req, res, {
      login: { accountId: login },
      select_account: {},
    }, { mergeWithLastSubmission: false });
    return redirect(res, to);
  }

  if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'method not allowed', 'text/plain');
  switch (prompt.name) {
    case 'login':
    case 'select_account':
      return send(res, 200, loginPage({
        uid, prompt: prompt.name, reasons: prompt.reasons, loginHint: params.login_hint,
      }));
    case 'consent': {
      // only reached with prompt=consent (grants are otherwise implicit): grant and continue
      const { grantId, session, prompt: { details: missing } } = details;
      let grant = grantId ? await p.Grant.find(grantId) : undefined;
      if (!grant) grant = new p.Grant({ accountId: session.accountId, clientId: params.client_id });
      if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
      if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
      if (missing.missingResourceScopes) {
        for (const [indicator, scope] of Object.entries(missing.missingResourceScopes)) {
          grant.addResourceScope(indicator, scope.join(' '));
        }
      }
      const to = await p.interactionResult(req, res, { consent: { grantId: await grant.save() } }, {
        mergeWithLastSubmission: true,
      });
      return redirect(res, to);
    }
    default:
      return send(res, 501, page('Error', `<p id="error">prompt ${esc(prompt.name)} not implemented</p>`));
  }
}

// ---------------------------------------------------------------------------------------------
// admin routes

const publicJwk = ({ d, p, q, dp, dq, qi, ...pub }) => pub;

function keyInfo() {
  return { kid: keys[0].kid, alg: keys[0].alg, kids: keys.map((k) => k.kid), jwks: { keys: keys.map(publicJwk) } };
}

async function readJsonBody(req) {
  const raw = (await readBody(req)).trim();
  if (!raw) return {};
  const v = JSON.parse(raw);
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error('body must be a JSON object');
  return v;
}

const RUNTIME_SETTINGS = {
  access_ttl: 'accessTtl',
  refresh_ttl: 'refreshTtl',
  id_token_ttl: 'idTokenTtl',
  rotate_refresh_tokens: 'rotateRefreshTokens',
  issue_refresh_tokens: 'issueRefreshTokens',
  expires_with_session: 'expiresWithSession',
  logout_confirm: 'logoutConfirm',
};

async function admin(req, res, url) {
  const route = `${req.method} ${url.pathname}`;
  let body = {};
  if (req.method === 'POST') {
    try {
      body = await readJsonBody(req);
    } catch (err) {
      return sendJson(res, 400, { error: 'invalid_request', error_description: err.message });
    }
  }
  switch (route) {
    case 'GET /__admin/health':
      return sendJson(res, 200, { ok: true, issuer });
    case 'GET /__admin/stats':
      return sendJson(res, 200, {
        ...stats, issuer, alg: keys[0].alg, kid: keys[0].kid, kids: keys.map((k) => k.kid),
      });
    case 'POST /__admin/stats/reset':
      stats = { ...freshStats(), provider_builds: stats.provider_builds, key_rotations: stats.key_rotations };
      return sendJson(res, 200, { ok: true });
    case 'GET /__admin/keys':
      return sendJson(res, 200, keyInfo());
    case 'POST /__admin/rotate-keys': {
      const alg = body.alg ?? keys[0].alg;
      if (!ALGS.has(alg)) return sendJson(res, 400, { error: 'invalid_request', error_description: 'unsupported alg' });
      const previous = keys[0].kid;
      const fresh = generateSigningKey(alg);
      keys = body.keep_old ? [fresh, ...keys] : [fresh];
      if (alg !== settings.alg) {
        // clients sign ID tokens with the new algorithm from now on
        settings.alg = alg;
        clients = clients.map((c) => ({ ...c, id_token_signed_response_alg: alg }));
      }
      buildProvider();
      stats.key_rotations += 1;
      return sendJson(res, 200, { ...keyInfo(), previous_kid: previous });
    }
    case 'POST /__admin/clients': {
      // upsert one client (same fields as in the configuration's `clients`)
      let c;
      try {
        if (!body.client_id || !Array.isArray(body.redirect_uris)) throw new Error('client_id and redirect_uris are required');
        if (usesKeys(body) ? !body.jwks_uri === !body.jwks : !body.client_secret) throw new Error('a client_secret, or for private_key_jwt jwks_uri or jwks, is required');
        c = { ...body };
      } catch (err) {
        return sendJson(res, 400, { error: 'invalid_request', error_description: err.message });
      }
      const before = clients;
      clients = [...clients.filter((x) => x.client_id !== c.client_id), c];
      const err = await rebuildOrRollback(() => { clients = before; });
      if (err) return sendJson(res, 400, { error: 'invalid_client_metadata', error_description: err.message });
      return sendJson(res, 200, { ok: true, clients: clients.map((x) => x.client_id) });
    }
    case 'POST /__admin/config': {
      const before = { ...settings };
      for (const [k, v] of Object.entries(body)) {
        const name = RUNTIME_SETTINGS[k];
        if (!name) return sendJson(res, 400, { error: 'invalid_request', error_description: `${k} cannot be changed at runtime` });
        settings[name] = v;
      }
      const err = await rebuildOrRollback(() => { Object.assign(settings, before); });
      if (err) return sendJson(res, 400, { error: 'invalid_request', error_description: err.message });
      return sendJson(res, 200, { ok: true });
    }
    default:
      return sendJson(res, 404, { error: 'not_found' });
  }
}

// ---------------------------------------------------------------------------------------------
// server

const server = http.createServer(async (req, res) => {
  if (settings.log) {
    res.on('finish', () => process.stderr.write(`oidc-server: ${req.method} ${req.originalUrl ?? req.url} -> ${res.statusCode}\n`));
  }
  try {
    const url = new URL(req.url, 'http://127.0.0.1');
    const { pathname } = url;
    if (pathname.startsWith('/__admin/')) return await admin(req, res, url);
    if (!handler) return send(res, 503, 'starting', 'text/plain');

    let rest = pathname;
    if (mountPath) {
      if (pathname !== mountPath && !pathname.startsWith(`${mountPath}/`)) {
        return sendJson(res, 404, { error: 'not_found', error_description: `the provider is mounted at ${mountPath}/` });
      }
      rest = pathname.slice(mountPath.length) || '/';
    }
    if (rest.startsWith('/interaction/')) return await interaction(req, res, rest);
    if (settings.mcpResource && pathname === '/mcp') {
      // The MCP server itself: no token, no entry, and where to read about it.
      stats.mcp.probes += 1;
      res.setHeader('www-authenticate', `Bearer resource_metadata="${mcpResourceUrl().replace('/mcp', '/.well-known/oauth-protected-resource/mcp')}"`);
      return sendJson(res, 401, { error: 'invalid_token' });
    }
    if (settings.mcpResource && pathname === '/.well-known/oauth-protected-resource/mcp') {
      stats.mcp.metadata_requests += 1;
      return sendJson(res, 200, { resource: mcpResourceUrl(), authorization_servers: [issuer], scopes_supported: [MCP_SCOPE] });
    }
    if (mountPath) {
      // oidc-provider derives its mount path from originalUrl minus url
      req.originalUrl = req.url;
      req.url = req.url.slice(mountPath.length) || '/';
    }
    return handler(req, res);
  } catch (err) {
    process.stderr.write(`oidc-server: ${err?.stack ?? err}\n`);
    if (!res.headersSent) send(res, 500, page('Error', `<p id="error" data-error="server_error">${esc(err.message)}</p>`));
    else res.destroy();
  }
});

let exiting = false;
function shutdown(reason, code = 0) {
  if (exiting) return;
  exiting = true;
  process.stderr.write(`oidc-server: ${reason}, exiting\n`);
  server.close();
  server.closeAllConnections?.();
  setTimeout(() => process.exit(code), 50).unref();
  process.exitCode = code;
}

process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));
if (settings.exitOnStdinClose) {
  process.stdin.on('end', () => shutdown('stdin closed'));
  process.stdin.on('close', () => shutdown('stdin closed'));
  process.stdin.on('error', () => shutdown('stdin error'));
  process.stdin.resume();
}

server.on('error', (err) => fail(`listen failed: ${err.message}`));
server.listen(settings.port, '127.0.0.1', async () => {
  const { port } = server.address();
  issuer = `http://127.0.0.1:${port}${settings.issuerPath ?? ''}`;
  try {
    buildProvider();
    await validateClients();
  } catch (err) {
    fail(`provider configuration failed: ${err.message}`);
  }
  process.stdout.write(`${JSON.stringify({ ready: true, issuer, port })}\n`);
});
