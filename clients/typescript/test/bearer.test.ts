// JwtVerifier and bearerAuth (the bearer check of MCP callers, `/server`) against a real
// node:http IdP on 127.0.0.1:0 that serves its discovery document and a JWKS, with access
// tokens signed by its keys (and by others). Each refusal is an OAuthError invalid_token;
// why is read from the log, which never holds the token.

import assert from 'node:assert/strict';
import { type IncomingMessage, type ServerResponse, createServer } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { type JWK, type JWTHeaderParameters, SignJWT, exportJWK, generateKeyPair } from 'jose';
import { OAuthError, OAuthErrorCode } from '@modelcontextprotocol/server';
import { JwtVerifier, type JwtVerifierOptions, bearerAuth } from '@mcp-connect/client/server';
import { listen, settled } from './helpers.js';

const RESOURCE = 'https://mcp.example/mcp';

type SigningKey = CryptoKey | Uint8Array;

/** A stand-in IdP: the discovery document (replaceable), the JWKS (mutable), what was asked. */
interface Idp {
  issuer: string;
  keys: JWK[];
  /** Replaces the discovery document (by default `{ issuer, jwks_uri }`). */
  discovery?: (issuer: string) => unknown;
  /** Answers /jwks with this status instead of the keys. */
  jwksStatus?: number;
  requests: string[];
  jwksFetches(): number;
}

async function idp(keys: JWK[], route?: (req: IncomingMessage, res: ServerResponse) => boolean): Promise<Idp> {
  const state: Idp = {
    issuer: '',
    keys,
    requests: [],
    jwksFetches: () => state.requests.filter((r) => r === '/jwks').length,
  };
  const server = createServer((req, res) => {
    state.requests.push(req.url ?? '');
    if (route?.(req, res) === true) return;
    if (req.url === '/.well-known/openid-configuration') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(state.discovery ? state.discovery(state.issuer) : { issuer: state.issuer, jwks_uri: `${state.issuer}/jwks` }));
    } else if (req.url === '/jwks') {
      res.writeHead(state.jwksStatus ?? 200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ keys: state.keys }));
    } else {
      res.writeHead(404).end();
    }
  });
  state.issuer = await listen(server);
  after(() => server.close());
  return state;
}

/** The published form of a key: its public JWK with the given kid (and alg, if any). */
async function published(key: CryptoKey, kid: string, alg?: string): Promise<JWK> {
  const jwk = await exportJWK(key);
  // As an IdP publishes it: no WebCrypto export fields, no alg unless given.
  delete jwk.key_ops;
  delete jwk.ext;
  delete jwk.alg;
  return { ...jwk, kid, use: 'sig', ...(alg !== undefined && { alg }) };
}

let rsa: CryptoKeyPair; // k1, RS256
let ec: CryptoKeyPair; // k2, ES256
let pss: CryptoKeyPair; // k4, an RSA key published without alg, used with PS256
let rotated: CryptoKeyPair; // k3, not published at first
let stranger: CryptoKeyPair; // nobody's
let keys: JWK[];
before(async () => {
  [rsa, ec, pss, rotated, stranger] = await Promise.all([
    generateKeyPair('RS256'),
    generateKeyPair('ES256'),
    generateKeyPair('PS256'),
    generateKeyPair('RS256'),
    generateKeyPair('RS256'),
  ]);
  keys = [await published(rsa.publicKey, 'k1', 'RS256'), await published(ec.publicKey, 'k2', 'ES256'), await published(pss.publicKey, 'k4')];
});

const nowSeconds = () => Math.floor(Date.now() / 1000);

interface TokenSpec {
  /** Header parameters over `{ alg: 'RS256', kid: 'k1', typ: 'at+jwt' }`; undefined removes one. */
  header?: Record<string, unknown>;
  /** Claims over the defaults (iss, aud, sub, client_id, scope, iat, exp); undefined removes one. */
  claims?: Record<string, unknown>;
  key?: SigningKey;
}

const defined = (o: Record<string, unknown>) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));

/** An access token of `issuer` for RESOURCE, signed with k1 unless said otherwise. */
function token(issuer: string, spec: TokenSpec = {}): Promise<string> {
  const now = nowSeconds();
  const claims = defined({ iss: issuer, aud: RESOURCE, sub: 'alice', client_id: 'c1', scope: 'read write', iat: now, exp: now + 300, ...spec.claims });
  const header = defined({ alg: 'RS256', kid: 'k1', typ: 'at+jwt', ...spec.header }) as unknown as JWTHeaderParameters;
  return new SignJWT(claims).setProtectedHeader(header).sign(spec.key ?? rsa.privateKey);
}

/** A token with the given header and claims and no signature check possible (`alg: none`). */
function unsigned(header: Record<string, unknown>, claims: Record<string, unknown>): string {
  const part = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  return `${part(header)}.${part(claims)}.`;
}

/** A verifier of `p`'s tokens for RESOURCE, logging into `log`. */
function verifier(p: Idp, log: string[], options: JwtVerifierOptions = {}): Promise<JwtVerifier> {
  return JwtVerifier.discover(p.issuer, RESOURCE, { logger: { warn: (m) => log.push(m) }, ...options });
}

/** An IdP of its own and a verifier of it, both of whose clocks (wall and monotonic) `tick` moves. */
async function clocked(options: JwtVerifierOptions = {}) {
  const p = await idp([...keys]);
  const log: string[] = [];
  let clock = Date.now() / 1000;
  const v = await verifier(p, log, { now: () => clock, monotonic: () => clock, ...options });
  return { p, log, v, tick: (seconds: number) => (clock += seconds) };
}

/** `tok` is refused with OAuthError invalid_token; what was logged meanwhile (never the token). */
async function refused(v: JwtVerifier, log: string[], tok: string): Promise<string> {
  const from = log.length;
  const e = await settled(v.verifyAccessToken(tok));
  assert.ok(e instanceof OAuthError, `refused with an OAuthError, got ${String(e)}`);
  assert.equal(e.code, OAuthErrorCode.InvalidToken);
  const logged = log.slice(from).join('\n');
  assert.ok(!logged.includes(tok) && !e.message.includes(tok), 'the token is not logged');
  assert.ok(!e.message.includes('refused'), 'the reason goes to the log, not to the client');
  return logged;
}

describe('JwtVerifier: a good token', () => {
  let p: Idp;
  let v: JwtVerifier;
  const log: string[] = [];
  before(async () => {
    p = await idp(keys);
    v = await verifier(p, log);
  });

  test('yields the subject, the expiry, the scopes, the client and the resource', async () => {
    const exp = nowSeconds() + 120;
    const tok = await token(p.issuer, { claims: { exp } });
    const info = await v.verifyAccessToken(tok);
    assert.equal(info.token, tok);
    assert.equal(info.clientId, 'c1');
    assert.deepEqual(info.scopes, ['read', 'write']);
    assert.equal(info.expiresAt, exp);
    assert.equal(info.resource?.href, RESOURCE);
    assert.deepEqual(info.extra, { sub: 'alice', iss: p.issuer });
    assert.deepEqual(log, []);
  });

  test('azp stands for a missing client_id; no scope claim is no scopes', async () => {
    const info = await v.verifyAccessToken(await token(p.issuer, { claims: { client_id: undefined, azp: 'c2', scope: undefined } }));
    assert.equal(info.clientId, 'c2');
    assert.deepEqual(info.scopes, []);
  });

  test('ES256, and PS256 with an RSA key published without alg, pass too', async () => {
    assert.equal((await v.verifyAccessToken(await token(p.issuer, { header: { alg: 'ES256', kid: 'k2' }, key: ec.privateKey }))).extra?.sub, 'alice');
    assert.equal((await v.verifyAccessToken(await token(p.issuer, { header: { alg: 'PS256', kid: 'k4' }, key: pss.privateKey }))).extra?.sub, 'alice');
  });

  test('typ at+jwt or application/at+jwt, in any ASCII case, passes', async () => {
    for (const typ of ['at+jwt', 'AT+JWT', 'application/at+jwt', 'Application/At+JWT']) {
      assert.equal((await v.verifyAccessToken(await token(p.issuer, { header: { typ } }))).extra?.sub, 'alice', typ);
    }
  });

  test('an exp or nbf within the 30 s clock skew passes', async () => {
    const now = nowSeconds();
    await v.verifyAccessToken(await token(p.issuer, { claims: { exp: now - 10 } }));
    await v.verifyAccessToken(await token(p.issuer, { claims: { nbf: now + 10 } }));
    assert.deepEqual(log, []);
  });
});

describe('JwtVerifier: each refusal, with its reason', () => {
  let p: Idp;
  let v: JwtVerifier;
  const log: string[] = [];
  before(async () => {
    p = await idp(keys);
    v = await verifier(p, log);
  });

  test('a token for another audience', async () => {
    assert.match(await refused(v, log, await token(p.issuer, { claims: { aud: 'https://other.example/mcp' } })), /access token refused: unexpected "aud" claim value/);
  });

  test('a token without aud', async () => {
    assert.match(await refused(v, log, await token(p.issuer, { claims: { aud: undefined } })), /access token refused: missing required "aud" claim/);
  });

  test('a token of another issuer (signed with a published key)', async () => {
    assert.match(await refused(v, log, await token('https://idp.other.example')), /access token refused: unexpected "iss" claim value/);
  });

  test('typ JWT (an ID token) or any other type: "typ is not at+jwt"', async () => {
    for (const typ of ['JWT', 'jwt', 'application/jwt', 'at+jwt; charset=utf-8', 'at+jw', '', 'application/at+jwt ']) {
      assert.match(await refused(v, log, await token(p.issuer, { header: { typ } })), /access token refused: typ is not at\+jwt$/, JSON.stringify(typ));
    }
  });

  test('a token without typ: "no typ"', async () => {
    const tok = await token(p.issuer, { header: { typ: undefined } });
    assert.ok(!('typ' in (JSON.parse(Buffer.from(tok.split('.')[0] ?? '', 'base64url').toString()) as object)), 'the token has no typ at all');
    assert.match(await refused(v, log, tok), /access token refused: no typ$/);
  });

  test('an expired token (past the 30 s clock skew)', async () => {
    assert.match(await refused(v, log, await token(p.issuer, { claims: { exp: nowSeconds() - 60 } })), /access token refused: "exp" claim timestamp check failed/);
  });

  test('a token without exp', async () => {
    assert.match(await refused(v, log, await token(p.issuer, { claims: { exp: undefined } })), /access token refused: missing required "exp" claim/);
  });

  test('a token not valid yet (nbf, iat)', async () => {
    assert.match(await refused(v, log, await token(p.issuer, { claims: { nbf: nowSeconds() + 120 } })), /access token refused: "nbf" claim timestamp check failed/);
    assert.match(await refused(v, log, await token(p.issuer, { claims: { iat: nowSeconds() + 120 } })), /access token refused: "iat" claim timestamp check failed/);
  });

  test('a token without sub, or with an empty one', async () => {
    assert.match(await refused(v, log, await token(p.issuer, { claims: { sub: undefined } })), /access token refused: missing required "sub" claim/);
    assert.match(await refused(v, log, await token(p.issuer, { claims: { sub: '' } })), /access token refused: empty sub$/);
  });

  test('an HS256 (symmetric) token, even one keyed with the published public key', async () => {
    const secret = new TextEncoder().encode(JSON.stringify(keys[0]));
    assert.match(await refused(v, log, await token(p.issuer, { header: { alg: 'HS256' }, key: secret })), /access token refused: algorithm "HS256" is not accepted$/);
  });

  test('alg none, and algorithms outside RS256/PS256/ES256', async () => {
    const now = nowSeconds();
    const claims = { iss: p.issuer, aud: RESOURCE, sub: 'alice', exp: now + 300 };
    assert.match(await refused(v, log, unsigned({ alg: 'none', kid: 'k1', typ: 'at+jwt' }, claims)), /access token refused: algorithm "none" is not accepted$/);
    const rs512 = await generateKeyPair('RS512');
    assert.match(await refused(v, log, await token(p.issuer, { header: { alg: 'RS512' }, key: rs512.privateKey })), /access token refused: algorithm "RS512" is not accepted$/);
  });

  test('a token without kid', async () => {
    assert.match(await refused(v, log, await token(p.issuer, { header: { kid: undefined } })), /access token refused: no kid$/);
  });

  test('a key published for one algorithm is not used with another', async () => {
    const tok = await token(p.issuer, { header: { alg: 'PS256', kid: 'k1' }, key: (await generateKeyPair('PS256')).privateKey });
    assert.match(await refused(v, log, tok), /access token refused: the token's alg is not its key's$/);
  });

  test('a published kid on a token signed by another key', async () => {
    assert.match(await refused(v, log, await token(p.issuer, { key: stranger.privateKey })), /access token refused: signature verification failed/);
  });

  test('something that is not a JWT', async () => {
    assert.match(await refused(v, log, 'not-a-jwt'), /access token refused: /);
  });
});

describe('JwtVerifier: an unknown kid', () => {
  test('refetches the JWKS at most every 30 s; a key published since is then found', async () => {
    const { p, log, v, tick } = await clocked();
    assert.equal(p.jwksFetches(), 1);
    const tok = await token(p.issuer, { header: { kid: 'k3' }, key: rotated.privateKey });
    // Right after discovery: no refetch.
    assert.match(await refused(v, log, tok), /access token refused: no key with that kid$/);
    assert.equal(p.jwksFetches(), 1);
    tick(31);
    assert.match(await refused(v, log, tok), /access token refused: no key with that kid$/);
    assert.equal(p.jwksFetches(), 2, 'refetched once');
    await refused(v, log, tok);
    tick(20);
    await refused(v, log, tok);
    assert.equal(p.jwksFetches(), 2, 'not again within 30 s');
    p.keys.push(await published(rotated.publicKey, 'k3', 'RS256'));
    tick(11);
    assert.equal((await v.verifyAccessToken(tok)).extra?.sub, 'alice');
    assert.equal(p.jwksFetches(), 3);
  });

  test('concurrent tokens with unknown kids share one refetch', async () => {
    const { p, v, tick } = await clocked();
    tick(31);
    const toks = await Promise.all(['x1', 'x2', 'x3', 'x4'].map((kid) => token(p.issuer, { header: { kid }, key: rotated.privateKey })));
    const results = await Promise.all(toks.map((t) => settled(v.verifyAccessToken(t))));
    for (const r of results) assert.ok(r instanceof OAuthError);
    assert.equal(p.jwksFetches(), 2);
  });

  test('a failed refetch refuses the token (never a 500) and keeps the keys it had', async () => {
    let down = false;
    const { p, log, v, tick } = await clocked({
      fetch: (input, init) => (down ? Promise.reject(new TypeError('fetch failed')) : fetch(input, init)),
    });
    const tok = await token(p.issuer, { header: { kid: 'k3' }, key: rotated.privateKey });
    p.jwksStatus = 500;
    tick(31);
    assert.match(await refused(v, log, tok), /access token refused: the JWKS could not be fetched \(.*answered 500\)$/);
    assert.equal(p.jwksFetches(), 2);
    down = true;
    tick(31);
    assert.match(await refused(v, log, tok), /access token refused: the JWKS could not be fetched \(TypeError\)$/);
    // The keys of before still verify.
    assert.equal((await v.verifyAccessToken(await token(p.issuer))).extra?.sub, 'alice');
  });
});

describe('JwtVerifier: the JWKS ages (security review of issue 41)', () => {
  const far = () => ({ claims: { exp: nowSeconds() + 10 * 86_400 } });

  test('a key the IdP removed stops verifying once the JWKS is older than 10 minutes', async () => {
    const { p, log, v, tick } = await clocked();
    const tok = await token(p.issuer, far());
    assert.equal((await v.verifyAccessToken(tok)).extra?.sub, 'alice');
    p.keys = p.keys.filter((k) => k.kid !== 'k1'); // compromised, pulled
    tick(599);
    assert.equal((await v.verifyAccessToken(tok)).extra?.sub, 'alice', 'young keys are not fetched again');
    assert.equal(p.jwksFetches(), 1);
    tick(2);
    assert.match(await refused(v, log, tok), /access token refused: no key with that kid$/);
    assert.equal(p.jwksFetches(), 2);
  });

  test('with the IdP down, the keys held serve an hour past their age, then nothing does', async () => {
    const { p, log, v, tick } = await clocked();
    const tok = await token(p.issuer, far());
    p.jwksStatus = 500;
    tick(601);
    assert.equal((await v.verifyAccessToken(tok)).extra?.sub, 'alice', 'within the grace');
    assert.equal(p.jwksFetches(), 2, 'it tried');
    tick(3600);
    assert.match(await refused(v, log, tok), /access token refused: the JWKS could not be fetched/);
  });

  test('a JWKS without a usable key does not replace the keys held', async () => {
    const { p, log, v, tick } = await clocked();
    p.keys = [];
    tick(601);
    assert.equal((await v.verifyAccessToken(await token(p.issuer, far()))).extra?.sub, 'alice');
    assert.match(log.join('\n'), /no usable key/);
  });

  test('a wall clock stepping back does not hold up the refetch (it runs on a monotonic clock)', async () => {
    const p = await idp([...keys]);
    const log: string[] = [];
    let mono = 0;
    const v = await verifier(p, log, { now: () => Date.now() / 1000 - 86_400, monotonic: () => mono });
    mono += 31;
    await refused(v, log, await token(p.issuer, { header: { kid: 'k3' }, key: rotated.privateKey }));
    assert.equal(p.jwksFetches(), 2, 'refetched: 31 s passed, whatever the wall clock says');
  });

  test('an attacker-chosen header value is logged shortened', async () => {
    const p = await idp([...keys]);
    const log: string[] = [];
    const v = await verifier(p, log);
    const line = await refused(v, log, unsigned({ alg: 'A'.repeat(8000), typ: 'at+jwt', kid: 'k1' }, { sub: 'x' }));
    assert.ok(line.length < 200, `${line.length} characters`);
  });
});

describe('JwtVerifier.discover', () => {
  test('refuses a discovery document that names another issuer (RFC 8414 §3.3)', async () => {
    const p = await idp(keys);
    p.discovery = () => ({ issuer: 'https://idp.other.example', jwks_uri: `${p.issuer}/jwks` });
    await assert.rejects(verifier(p, []), /discovery names issuer "https:\/\/idp\.other\.example", expected "http:\/\/127\.0\.0\.1:\d+"/);
    assert.equal(p.jwksFetches(), 0);
  });

  test('refuses an issuer or a jwks_uri over plain http, unless on loopback', async () => {
    const fetched: string[] = [];
    const recording: typeof fetch = (input) => {
      fetched.push(input instanceof Request ? input.url : input instanceof URL ? input.href : input);
      return Promise.reject(new TypeError('not reached'));
    };
    const e = await settled(JwtVerifier.discover('http://idp.example', RESOURCE, { fetch: recording }));
    assert.ok(e instanceof Error && /https/.test(e.message), String(e));
    assert.deepEqual(fetched, [], 'nothing is fetched over plain http');
    const p = await idp(keys);
    p.discovery = (issuer) => ({ issuer, jwks_uri: 'http://keys.example/jwks' });
    const e2 = await settled(JwtVerifier.discover(p.issuer, RESOURCE));
    assert.ok(e2 instanceof Error && /jwks_uri/.test(e2.message) && /https/.test(e2.message), String(e2));
  });

  test('refuses a document without jwks_uri', async () => {
    const p = await idp(keys);
    p.discovery = (issuer) => ({ issuer });
    await assert.rejects(verifier(p, []), /the discovery document has no jwks_uri/);
  });

  test('reads <issuer>/.well-known/openid-configuration also for an issuer with a path or a trailing slash', async () => {
    const p = await idp(keys, (req, res) => {
      if (req.url !== '/realm/.well-known/openid-configuration') return false;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ issuer: `${p.issuer}/realm/`, jwks_uri: `${p.issuer}/jwks` }));
      return true;
    });
    const v = await JwtVerifier.discover(`${p.issuer}/realm/`, RESOURCE);
    assert.equal(v.issuer, `${p.issuer}/realm/`);
    assert.equal(v.audience, RESOURCE);
  });

  test('does not follow a redirect, and refuses an answer other than 200', async () => {
    const p = await idp(keys, (req, res) => {
      if (req.url !== '/.well-known/openid-configuration') return false;
      res.writeHead(302, { location: `${p.issuer}/elsewhere` }).end();
      return true;
    });
    await assert.rejects(verifier(p, []));
    assert.ok(!p.requests.includes('/elsewhere'), 'the redirect was not followed');
    const q = await idp(keys);
    q.jwksStatus = 503;
    await assert.rejects(verifier(q, []), /answered 503/);
  });

  test('refuses a document larger than 256 KiB', async () => {
    const p = await idp(keys);
    p.discovery = (issuer) => ({ issuer, jwks_uri: `${issuer}/jwks`, padding: 'x'.repeat(300 * 1024) });
    await assert.rejects(verifier(p, []), /more than 262144 bytes/);
  });
});

describe('bearerAuth', () => {
  test('authenticate: a good token is its AuthInfo; none or a bad one is 401 with the RFC 9728 pointer', async () => {
    const p = await idp(keys);
    const log: string[] = [];
    const auth = await bearerAuth({ issuer: p.issuer, resource: RESOURCE, logger: { warn: (m) => log.push(m) } });
    assert.equal(auth.resourceMetadataUrl, 'https://mcp.example/.well-known/oauth-protected-resource/mcp');
    const request = (tok?: string) => new Request(RESOURCE, { method: 'POST', headers: tok === undefined ? {} : { authorization: `Bearer ${tok}` } });

    const good = await auth.authenticate(request(await token(p.issuer)));
    assert.ok(!(good instanceof Response));
    assert.equal(good.extra?.sub, 'alice');

    const none = await auth.authenticate(request());
    assert.ok(none instanceof Response);
    assert.equal(none.status, 401);
    assert.match(none.headers.get('www-authenticate') ?? '', /^Bearer .*resource_metadata="https:\/\/mcp\.example\/\.well-known\/oauth-protected-resource\/mcp"/);

    const tok = await token(p.issuer, { header: { typ: 'JWT' } });
    const bad = await auth.authenticate(request(tok));
    assert.ok(bad instanceof Response);
    assert.equal(bad.status, 401);
    assert.match(bad.headers.get('www-authenticate') ?? '', /error="invalid_token"/);
    const body = await bad.text();
    assert.ok(!body.includes('typ') && !body.includes(tok), 'the reason is not told to the client');
    assert.match(log.join('\n'), /access token refused: typ is not at\+jwt/);
  });

  test('requiredScopes: a token without them is 403 insufficient_scope', async () => {
    const p = await idp(keys);
    const auth = await bearerAuth({ issuer: p.issuer, resource: RESOURCE, requiredScopes: ['admin'], logger: { warn: () => {} } });
    const r = await auth.authenticate(new Request(RESOURCE, { headers: { authorization: `Bearer ${await token(p.issuer)}` } }));
    assert.ok(r instanceof Response);
    assert.equal(r.status, 403);
    assert.match(r.headers.get('www-authenticate') ?? '', /insufficient_scope/);
  });

  test('metadataResponse: the RFC 9728 document at the root and at the path-aware well-known URL', async () => {
    const p = await idp(keys);
    const auth = await bearerAuth({ issuer: p.issuer, resource: RESOURCE });
    const doc = { resource: RESOURCE, authorization_servers: [p.issuer], bearer_methods_supported: ['header'] };
    assert.deepEqual(auth.metadata, doc);
    for (const path of ['/.well-known/oauth-protected-resource', '/.well-known/oauth-protected-resource/mcp']) {
      const r = auth.metadataResponse(new Request(`https://mcp.example${path}`));
      assert.ok(r !== undefined, path);
      assert.equal(r.status, 200);
      assert.match(r.headers.get('content-type') ?? '', /^application\/json/);
      assert.deepEqual(await r.json(), doc);
    }
    assert.equal(auth.metadataResponse(new Request('https://mcp.example/mcp')), undefined);
    assert.equal(auth.metadataResponse(new Request('https://mcp.example/.well-known/oauth-protected-resource/other')), undefined);
    assert.equal(auth.metadataResponse(new Request('https://mcp.example/.well-known/oauth-protected-resource', { method: 'POST' }))?.status, 405);
  });

  test('resourceMetadataUrl: the pointer and the path served follow it', async () => {
    const p = await idp(keys);
    const auth = await bearerAuth({ issuer: p.issuer, resource: RESOURCE, resourceMetadataUrl: 'https://mcp.example/meta/prm.json' });
    const r = await auth.authenticate(new Request(RESOURCE));
    assert.ok(r instanceof Response);
    assert.match(r.headers.get('www-authenticate') ?? '', /resource_metadata="https:\/\/mcp\.example\/meta\/prm\.json"/);
    assert.equal(auth.metadataResponse(new Request('https://mcp.example/meta/prm.json'))?.status, 200);
  });
});
