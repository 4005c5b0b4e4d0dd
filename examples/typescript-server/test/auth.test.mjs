// server.mjs's bearer check as it runs: started as a child process against a real node:http
// IdP that serves its discovery document and a JWKS with one RS256 key, then asked over
// real HTTP with access tokens signed by that key. Why a token was refused is read from
// the server's stderr (it never goes to the client).

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, request as httpRequest } from 'node:http';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { SignJWT, exportJWK, generateKeyPair } from 'jose';

const PUBLIC = 'http://mcp.test';
const RESOURCE = `${PUBLIC}/mcp`;
let port;
let idp;
let issuer;
let child;
let stderr = '';
let privateKey;
after(() => {
  child?.kill();
  idp?.close();
});

before(async () => {
  const pair = await generateKeyPair('RS256');
  privateKey = pair.privateKey;
  const jwk = { ...(await exportJWK(pair.publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' };
  idp = createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(req.url === '/.well-known/openid-configuration' ? { issuer, jwks_uri: `${issuer}/jwks` } : { keys: [jwk] }));
  });
  await new Promise((r) => idp.listen(0, '127.0.0.1', r));
  issuer = `http://127.0.0.1:${idp.address().port}`;
  child = spawn(process.execPath, [fileURLToPath(new URL('../server.mjs', import.meta.url))], {
    env: {
      ...process.env,
      MCP_LISTEN: '127.0.0.1:0',
      MCP_PUBLIC_URL: PUBLIC,
      MCP_ISSUER: issuer,
      MCP_CONNECT_URL: 'http://127.0.0.1:9',
      MCP_CONNECT_API_KEY: 'mcpc_test_key',
      MCP_STATE_KEY: randomBytes(32).toString('base64'),
      MCP_PROVIDERS: 'dev=http://127.0.0.1:9/userinfo',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stderr.on('data', (c) => (stderr += c));
  port = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (c) => {
      out += c;
      const m = /listening on [^\n]*:(\d+)\n/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    child.on('exit', (code) => reject(new Error(`server.mjs exited (${code}): ${stderr}`)));
  });
});

/** An access token of the IdP for this server, signed with its published key; `typ`
 * undefined writes none. */
function token(typ) {
  const header = { alg: 'RS256', kid: 'k1', ...(typ === undefined ? {} : { typ }) };
  return new SignJWT({ client_id: 'c1' }).setProtectedHeader(header).setIssuer(issuer).setAudience(RESOURCE).setSubject('alice').setIssuedAt().setExpirationTime('5m').sign(privateKey);
}

/** A tools/list POST to /mcp with `token` as its bearer token. */
function post(token) {
  return new Promise((resolve, reject) => {
    const headers = { host: 'mcp.test', 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${token}` };
    const req = httpRequest({ host: '127.0.0.1', port, path: '/mcp', method: 'POST', headers }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.end(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }));
  });
}

/** What the server logged while `f` ran (its stderr reaches this process a little later). */
async function logged(f, expected) {
  const from = stderr.length;
  const result = await f();
  for (let i = 0; i < 100 && !stderr.slice(from).includes(expected); i++) await new Promise((r) => setTimeout(r, 20));
  return { result, log: stderr.slice(from) };
}

test('a token whose typ is at+jwt or application/at+jwt, in any case, passes the bearer check', async () => {
  for (const typ of ['at+jwt', 'AT+JWT', 'application/at+jwt', 'Application/At+JWT']) {
    const from = stderr.length;
    const r = await post(await token(typ));
    assert.notEqual(r.status, 401, `${typ}: ${r.text}`);
    assert.equal(r.headers['www-authenticate'], undefined, typ);
    assert.doesNotMatch(stderr.slice(from), /access token refused/, typ);
  }
});

test('a token without typ is refused (401), with the reason "no typ"', async () => {
  const tok = await token(undefined);
  assert.ok(!('typ' in JSON.parse(Buffer.from(tok.split('.')[0], 'base64url'))), 'the token has no typ at all');
  const { result: r, log } = await logged(() => post(tok), 'access token refused: no typ');
  assert.equal(r.status, 401);
  assert.match(r.headers['www-authenticate'], /invalid_token/);
  assert.match(log, /access token refused: no typ\n/);
  assert.ok(!log.includes(tok), 'the token is not logged');
});

test('a token whose typ is JWT (an ID token) or another type is refused (401), with the reason "typ is not at+jwt"', async () => {
  for (const typ of ['JWT', 'application/jwt', 'at+jwt; charset=utf-8', '']) {
    const { result: r, log } = await logged(async () => post(await token(typ)), 'access token refused: typ is not at+jwt');
    assert.equal(r.status, 401, JSON.stringify(typ));
    assert.match(log, /access token refused: typ is not at\+jwt\n/, JSON.stringify(typ));
  }
});
