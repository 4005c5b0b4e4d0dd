#!/usr/bin/env node
// A remote MCP server protected by OAuth, whose authorization is built only from the official
// TypeScript SDK (@modelcontextprotocol/sdk 1.32.2): a test peer for mcp-connect acting as an
// OAuth client of MCP servers (RFC 9728 discovery, RFC 7591 registration, code flow with PKCE
// and the RFC 8707 `resource`, then the bearer token at /mcp).
//
//   node auth_mcp_server.mjs '{"port":0,"host":"127.0.0.1","access_ttl":3600,
//                              "challenge_on_post_only":false,"root_prm_only":false,
//                              "challenge_scope":null,"exit_on_stdin_close":true}'
//
// The SDK's mcpAuthRouter (rate limits off) serves /.well-known/oauth-authorization-server,
// /authorize, /token, /register, /revoke and the protected resource metadata; the provider
// below is our own in-memory one. /authorize shows a consent form that POSTs to
// /interaction/approve. /mcp is the SDK's McpServer over a stateless Streamable HTTP transport
// behind requireBearerAuth (with its audience check), with one tool `whoami`.
// GET /__admin/stats returns what was recorded.
//
// stdout carries exactly one line once listening:
//   {"ready":true,"port":N,"origin":"http://127.0.0.1:N","issuer":"http://<host>:N/","resource":"..."}
// Logs go to stderr. Exits when stdin closes (unless exit_on_stdin_close is false).

import { randomBytes } from 'node:crypto';
import process from 'node:process';
import express from 'express';
import { mcpAuthRouter, getOAuthProtectedResourceMetadataUrl } from '@modelcontextprotocol/sdk/server/auth/router.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import { metadataHandler } from '@modelcontextprotocol/sdk/server/auth/handlers/metadata.js';
import {
  InvalidGrantError, InvalidScopeError, InvalidTargetError, InvalidTokenError,
} from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';

const log = (...a) => process.stderr.write(`auth_mcp_server: ${a.join(' ')}\n`);
console.log = console.info = console.error; // keep stdout for the ready line only
function fail(msg) { log(msg); process.exit(2); }

let cfg;
try { cfg = JSON.parse(process.argv[2] ?? '{}'); } catch (e) { fail(`bad config JSON: ${e.message}`); }
const KNOWN = ['port', 'host', 'access_ttl', 'challenge_on_post_only', 'root_prm_only', 'challenge_scope', 'exit_on_stdin_close'];
if (!cfg || typeof cfg !== 'object' || Array.isArray(cfg)) fail('config must be a JSON object');
for (const k of Object.keys(cfg)) if (!KNOWN.includes(k)) fail(`unknown config field ${k}`);
const host = cfg.host ?? '127.0.0.1';
if (!['127.0.0.1', 'localhost'].includes(host)) fail(`host must be 127.0.0.1 or localhost`);
const accessTtl = Number(cfg.access_ttl ?? 3600);
if (!(accessTtl > 0)) fail('access_ttl must be a positive number of seconds');
const postOnly = !!cfg.challenge_on_post_only, rootPrmOnly = !!cfg.root_prm_only;
const challengeScope = cfg.challenge_scope || null;

const stats = {
  registrations: [], authorize: [], token: [], probes: { get: 0, post: 0, other: 0 },
  prm_requests: 0, well_known: [], refresh_reuse: 0, revocations: 0, revoked: [], mcp_calls: [],
};
const rnd = (n = 32) => randomBytes(n).toString('base64url');
const sameResource = (a, b) => String(a).replace(/#.*$/, '').replace(/\/$/, '') === String(b).replace(/#.*$/, '').replace(/\/$/, '');
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

// Set once listening (the port is known only then).
let issuerUrl, mcpUrl, resourceUrl, prmUrl;

// --- the provider: an OAuthServerProvider (see the SDK's server/auth/provider.d.ts) ----------
const clients = new Map(), pending = new Map(), codes = new Map();
const access = new Map(), refresh = new Map();

function issueTokens(g, family) {
  const at = rnd(), rt = rnd();
  access.set(at, { ...g, family, exp: Date.now() + accessTtl * 1000 });
  refresh.set(rt, { ...g, family, used: false });
  const out = { access_token: at, token_type: 'Bearer', expires_in: accessTtl, refresh_token: rt };
  if (g.scopes.length) out.scope = g.scopes.join(' ');
  return out;
}
function revokeFamily(family) {
  for (const m of [access, refresh]) for (const [k, v] of m) if (v.family === family) m.delete(k);
}
function checkResource(resource) {
  if (resource && !sameResource(resource.href, resourceUrl.href)) throw new InvalidTargetError(`unknown resource ${resource.href}`);
}

const provider = {
  clientsStore: {
    async getClient(id) { return clients.get(id); },
    async registerClient(c) { clients.set(c.client_id, c); return c; },
  },
  async authorize(client, params, res) {
    checkResource(params.resource);
    const txn = rnd(16);
    pending.set(txn, { clientId: client.client_id, params, exp: Date.now() + 600_000 });
    res.status(200).type('html').send(`<!doctype html><html><head><title>Authorize</title></head><body>
<h1>Authorize ${esc(client.client_name ?? client.client_id)}</h1>
<p>Scopes: ${esc(params.scopes.join(' ').trim() || '(none)')}; resource: ${esc(params.resource?.href ?? '(none)')}</p>
<form method="post" action="${esc(new URL('/interaction/approve', issuerUrl).href)}">
<input type="hidden" name="txn" value="${esc(txn)}">
<label>User <input name="username" value=""></label>
<button name="decision" value="allow">Allow</button> <button name="decision" value="deny">Deny</button>
</form></body></html>`);
  },
  async challengeForAuthorizationCode(client, code) {
    const c = codes.get(code);
    if (!c || c.clientId !== client.client_id || c.exp < Date.now()) throw new InvalidGrantError('invalid authorization code');
    return c.codeChallenge;
  },
  async exchangeAuthorizationCode(client, code, _verifier, redirectUri, resource) {
    const c = codes.get(code);
    codes.delete(code); // one use, even when refused below
    if (!c || c.clientId !== client.client_id || c.exp < Date.now()) throw new InvalidGrantError('invalid authorization code');
    if (redirectUri !== undefined && redirectUri !== c.redirectUri) throw new InvalidGrantError('redirect_uri does not match');
    checkResource(resource);
    if (resource && c.resource && !sameResource(resource.href, c.resource)) throw new InvalidTargetError('resource differs from the authorization request');
    const g = { clientId: client.client_id, username: c.username, scopes: c.scopes, resource: c.resource ?? resource?.href };
    return issueTokens(g, rnd(8));
  },
  async exchangeRefreshToken(client, token, scopes, resource) {
    scopes = scopes?.filter(Boolean);
    if (scopes && !scopes.length) scopes = undefined;
    const r = refresh.get(token);
    if (!r || r.clientId !== client.client_id) throw new InvalidGrantError('invalid refresh token');
    if (r.used) {
      stats.refresh_reuse += 1;
      revokeFamily(r.family);
      throw new InvalidGrantError('refresh token already used');
    }
    if (scopes && !scopes.every((s) => r.scopes.includes(s))) throw new InvalidScopeError('scope exceeds the grant');
    checkResource(resource);
    if (resource && r.resource && !sameResource(resource.href, r.resource)) throw new InvalidTargetError('resource differs from the grant');
    r.used = true;
    return issueTokens({ clientId: r.clientId, username: r.username, scopes: scopes ?? r.scopes, resource: r.resource ?? resource?.href }, r.family);
  },
  async verifyAccessToken(token) {
    const a = access.get(token);
    if (!a) throw new InvalidTokenError('unknown or revoked token');
    if (a.exp < Date.now()) throw new InvalidTokenError('Token has expired');
    return {
      token, clientId: a.clientId, scopes: a.scopes, expiresAt: Math.floor(a.exp / 1000),
      resource: a.resource ? new URL(a.resource) : undefined, extra: { username: a.username },
    };
  },
  async revokeToken(client, { token, token_type_hint }) {
    stats.revocations += 1;
    const a = access.get(token), r = refresh.get(token);
    let kind = 'unknown';
    if (a && a.clientId === client.client_id) { access.delete(token); kind = 'access'; }
    else if (r && r.clientId === client.client_id) { revokeFamily(r.family); kind = 'refresh'; }
    stats.revoked.push({ token_type_hint: token_type_hint ?? null, kind, client_id: client.client_id });
  },
};

// --- the HTTP app ---------------------------------------------------------------------------
const app = express();
app.set('etag', false);

// Records a request (with its final status and OAuth error) in a stats list.
function tap(list, parser, fields) {
  return [parser, (req, res, next) => {
    const entry = fields(req);
    list.push(entry);
    const json = res.json.bind(res);
    res.json = (b) => { if (b?.error) { entry.error = b.error; entry.error_description = b.error_description; } if (b?.client_id && !entry.client_id) entry.client_id = b.client_id; return json(b); };
    res.on('finish', () => { entry.status = res.statusCode; const l = res.get('location'); if (l) entry.location = l; });
    next();
  }];
}
const bodyOrQuery = (req) => (req.method === 'POST' ? req.body : req.query) ?? {};
app.post('/register', ...tap(stats.registrations, express.json(), (req) => {
  const b = req.body ?? {};
  return { token_endpoint_auth_method: b.token_endpoint_auth_method ?? null, application_type: b.application_type ?? null,
    grant_types: b.grant_types ?? null, redirect_uris: b.redirect_uris ?? null, scope: b.scope ?? null, body: b };
}));
app.all('/authorize', ...tap(stats.authorize, express.urlencoded({ extended: false }), (req) => {
  const p = bodyOrQuery(req);
  return { method: req.method, client_id: p.client_id ?? null, scope: p.scope ?? null, resource: p.resource ?? null,
    code_challenge_method: p.code_challenge_method ?? null, redirect_uri: p.redirect_uri ?? null };
}));
app.post('/token', ...tap(stats.token, express.urlencoded({ extended: false }), (req) => {
  const b = req.body ?? {}, basic = /^basic /i.test(req.headers.authorization ?? '');
  let basicId = null;
  try { if (basic) basicId = decodeURIComponent(Buffer.from(req.headers.authorization.slice(6).trim(), 'base64').toString().split(':')[0]); } catch { /* ignore */ }
  return { grant_type: b.grant_type ?? null, resource: b.resource ?? null, client_id: b.client_id ?? basicId,
    client_auth: basic ? 'basic' : b.client_secret !== undefined ? 'post' : 'none', scope: b.scope ?? null };
}));
app.use('/.well-known', (req, res, next) => {
  const prm = req.path.startsWith('/oauth-protected-resource');
  if (prm) stats.prm_requests += 1;
  const entry = { method: req.method, path: req.originalUrl };
  stats.well_known.push(entry);
  res.on('finish', () => { entry.status = res.statusCode; });
  // challenge_on_post_only: no PRM at any well-known URL, only at the challenge's /meta/prm.
  if (prm && postOnly) return res.status(404).json({ error: 'not_found' });
  next();
});
if (postOnly) app.use('/meta/prm', (req, res, next) => {
  stats.prm_requests += 1;
  const entry = { method: req.method, path: req.originalUrl };
  stats.well_known.push(entry);
  res.on('finish', () => { entry.status = res.statusCode; });
  next();
});

app.post('/interaction/approve', express.urlencoded({ extended: false }), (req, res) => {
  const { txn, username, decision } = req.body ?? {};
  const p = pending.get(String(txn ?? ''));
  pending.delete(String(txn ?? ''));
  if (!p || p.exp < Date.now()) return res.status(400).type('text').send('unknown or expired interaction');
  const target = new URL(p.params.redirectUri);
  if (p.params.state !== undefined) target.searchParams.set('state', p.params.state);
  if (decision !== 'allow') {
    target.searchParams.set('error', 'access_denied');
    return res.redirect(302, target.href);
  }
  if (!username || typeof username !== 'string') return res.status(400).type('text').send('username required');
  const code = rnd();
  codes.set(code, { clientId: p.clientId, redirectUri: p.params.redirectUri, codeChallenge: p.params.codeChallenge,
    scopes: p.params.scopes.filter(Boolean), resource: p.params.resource?.href, username, exp: Date.now() + 60_000 });
  target.searchParams.set('code', code); // no `iss`: the SDK's metadata does not advertise it
  res.redirect(302, target.href);
});

app.get('/__admin/stats', (_req, res) => res.json(stats));

function mountAuth() {
  const resourceServerUrl = rootPrmOnly ? new URL('/', issuerUrl) : mcpUrl;
  const scopesSupported = challengeScope ? undefined : ['mcp:tools'];
  app.use(mcpAuthRouter({
    provider, issuerUrl, resourceServerUrl, scopesSupported, resourceName: 'auth_mcp_server test peer',
    authorizationOptions: { rateLimit: false }, tokenOptions: { rateLimit: false },
    clientRegistrationOptions: { rateLimit: false }, revocationOptions: { rateLimit: false },
  }));
  if (postOnly) {
    app.use('/meta/prm', metadataHandler({
      resource: resourceServerUrl.href, authorization_servers: [issuerUrl.href], scopes_supported: scopesSupported,
      resource_name: 'auth_mcp_server test peer',
    }));
  }
  const bearer = requireBearerAuth({
    verifier: provider, requiredScopes: challengeScope ? challengeScope.split(' ') : [],
    resourceMetadataUrl: rootPrmOnly ? undefined : prmUrl, expectedResource: resourceUrl,
  });
  const notAllowed = (_req, res) => res.status(405).set('Allow', 'POST')
    .json({ jsonrpc: '2.0', error: { code: -32000, message: 'Method not allowed.' }, id: null });
  app.all('/mcp', (req, res, next) => {
    const m = req.method.toLowerCase();
    stats.probes[m in stats.probes ? m : 'other'] += 1;
    if (postOnly && req.method !== 'POST') return notAllowed(req, res);
    next();
  }, bearer, express.json(), async (req, res) => {
    if (req.method !== 'POST') return notAllowed(req, res);
    const username = req.auth?.extra?.username ?? null;
    // The resource (RFC 8707 audience) of the token that was accepted, as issued.
    const resource = req.auth?.resource?.href ?? null;
    for (const m of [req.body].flat()) stats.mcp_calls.push({ method: m?.method ?? null, username, resource });
    const server = new McpServer({ name: 'auth-mcp-server', version: '1.0.0' });
    server.registerTool('whoami', { description: 'The user the access token was issued to' },
      async (extra) => ({ content: [{ type: 'text', text: String(extra.authInfo?.extra?.username ?? '') }] }));
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => { transport.close().catch(() => {}); server.close().catch(() => {}); });
    try {
      await server.connect(transport);
      await transport.handleRequest(req, res, req.body);
    } catch (e) {
      log(`mcp error: ${e?.stack ?? e}`);
      if (!res.headersSent) res.status(500).json({ jsonrpc: '2.0', error: { code: -32603, message: 'Internal server error' }, id: null });
    }
  });
  app.use((req, res) => res.status(404).json({ error: 'not_found', path: req.path }));
  // eslint-disable-next-line no-unused-vars
  app.use((err, req, res, _next) => {
    log(`error on ${req.method} ${req.originalUrl}: ${err?.message ?? err}`);
    if (res.headersSent) return;
    if (req.path === '/mcp') return res.status(400).json({ jsonrpc: '2.0', error: { code: -32700, message: 'Parse error' }, id: null });
    res.status(err?.status ?? err?.statusCode ?? 500).json({ error: err?.status < 500 ? 'invalid_request' : 'server_error', error_description: String(err?.message ?? err) });
  });
}

process.on('uncaughtException', (e) => log(`uncaught: ${e?.stack ?? e}`));
process.on('unhandledRejection', (e) => log(`unhandled rejection: ${e?.stack ?? e}`));

const server = app.listen(Number(cfg.port ?? 0), '127.0.0.1');
server.on('error', (err) => fail(`listen failed: ${err.message}`));
server.on('listening', () => {
  const { port } = server.address();
  issuerUrl = new URL(`http://${host}:${port}/`);
  mcpUrl = new URL('/mcp', issuerUrl);
  resourceUrl = rootPrmOnly ? new URL('/', issuerUrl) : mcpUrl;
  prmUrl = postOnly ? new URL('/meta/prm', issuerUrl).href : getOAuthProtectedResourceMetadataUrl(mcpUrl);
  try { mountAuth(); } catch (e) { fail(`setup failed: ${e.message}`); }
  process.stdout.write(`${JSON.stringify({ ready: true, port, origin: `http://127.0.0.1:${port}`, issuer: issuerUrl.href, resource: resourceUrl.href })}\n`);
});

let exiting = false;
function shutdown(reason) {
  if (exiting) return;
  exiting = true;
  log(`${reason}, exiting`);
  server.close();
  server.closeAllConnections?.();
  setTimeout(() => process.exit(0), 50).unref();
}
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));
if (cfg.exit_on_stdin_close ?? true) {
  process.stdin.on('end', () => shutdown('stdin closed'));
  process.stdin.on('close', () => shutdown('stdin closed'));
  process.stdin.on('error', () => shutdown('stdin error'));
  process.stdin.resume();
}
