// server.mjs as it runs: started as a child process against a real node:http peer that
// serves the IdP's discovery document, then asked over real HTTP with the Host and Origin
// headers a browser (or a DNS-rebinding page) would send.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, request as httpRequest } from 'node:http';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const PUBLIC = 'http://mcp.test';
let port;
let idp;
let child;
after(() => {
  child?.kill();
  idp?.close();
});

before(async () => {
  idp = createServer((req, res) => {
    const issuer = `http://127.0.0.1:${idp.address().port}`;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(req.url === '/.well-known/openid-configuration' ? { issuer, jwks_uri: `${issuer}/jwks` } : { keys: [] }));
  });
  await new Promise((r) => idp.listen(0, '127.0.0.1', r));
  child = spawn(process.execPath, [fileURLToPath(new URL('../server.mjs', import.meta.url))], {
    env: {
      ...process.env,
      MCP_LISTEN: '127.0.0.1:0',
      MCP_PUBLIC_URL: PUBLIC,
      MCP_ISSUER: `http://127.0.0.1:${idp.address().port}`,
      MCP_CONNECT_URL: 'http://127.0.0.1:9',
      MCP_CONNECT_API_KEY: 'mcpc_test_key',
      MCP_STATE_KEY: randomBytes(32).toString('base64'),
      MCP_PROVIDERS: 'dev=http://127.0.0.1:9/userinfo',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (c) => (err += c));
  port = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (c) => {
      out += c;
      const m = /listening on [^\n]*:(\d+)\n/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    child.on('exit', (code) => reject(new Error(`server.mjs exited (${code}): ${err}`)));
  });
});

/** A POST to /mcp as sent over the wire (node:http lets the test set Host itself). */
function post(headers) {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path: '/mcp', method: 'POST', headers: { host: 'mcp.test', 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers } }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('error', reject);
    req.end(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }));
  });
}

test('a request from another origin is refused with 403 before anything else', async () => {
  for (const origin of ['http://evil.example', 'null', 'http://mcp.test.evil.example']) {
    const r = await post({ origin });
    assert.equal(r.status, 403, origin);
    assert.match(JSON.parse(r.text).error.message, /Invalid Origin/, origin);
  }
});

test('the same host on another port or scheme is another origin', async () => {
  for (const origin of ['http://mcp.test:8080', 'https://mcp.test']) {
    const r = await post({ origin });
    assert.equal(r.status, 403, origin);
    assert.match(JSON.parse(r.text).error.message, /Invalid Origin/, origin);
  }
});

test('our own origin, and no Origin at all (non-browser clients), reach the bearer check', async () => {
  for (const headers of [{ origin: PUBLIC }, {}]) {
    const r = await post(headers);
    assert.equal(r.status, 401, JSON.stringify(headers));
  }
});

test('the Host check still stands', async () => {
  const r = await post({ host: 'evil.example' });
  assert.equal(r.status, 403);
  assert.match(JSON.parse(r.text).error.message, /Invalid Host/);
});
