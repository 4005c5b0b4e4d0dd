// Secrets never show in strings, JSON, util.inspect, console output or errors.

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test } from 'node:test';
import { format, inspect } from 'node:util';
import { AccessToken, ApiKey, ConnectClient, RequestStateKey } from '../dist/index.js';

const SECRET = 'mcpc_0123456789abcdef_supersecret';

const views = (v) => [String(v), `${v}`, JSON.stringify(v), JSON.stringify({ v }), inspect(v), inspect({ nested: { v } }, { depth: 9, showHidden: true }), format('%s %o %O %j', v, v, v, v)];

test('ApiKey and AccessToken print a placeholder everywhere and reveal() on request', () => {
  for (const s of [new ApiKey(SECRET), new AccessToken(SECRET)]) {
    for (const view of views(s)) assert.ok(!view.includes('supersecret'), view);
    assert.equal(s.reveal(), SECRET);
    assert.deepEqual(Object.keys(s), []);
    assert.deepEqual({ ...s }, {});
  }
  assert.equal(String(new AccessToken('x')), 'AccessToken([REDACTED])');
  assert.throws(() => new ApiKey(''), TypeError);
});

test('a RequestStateKey and a ConnectClient never print their key', () => {
  const raw = Buffer.alloc(32, 0xab);
  const key = RequestStateKey.fromBytes(new Uint8Array(raw));
  for (const view of views(key)) {
    assert.ok(!view.includes(raw.toString('base64')) && !view.includes('ab,ab') && !view.includes('171'), view);
  }
  const client = new ConnectClient({ baseUrl: 'https://connect.example', apiKey: SECRET });
  for (const view of views(client)) assert.ok(!view.includes('supersecret'), view);
});

test('the token in a connected outcome stays redacted in JSON and inspect; errors carry no key', async () => {
  const server = createServer((req, res) => {
    const refused = req.url.includes('refuse');
    res.writeHead(refused ? 401 : 200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(refused ? { error: 'invalid_api_key', error_description: 'unknown key' } : { status: 'connected', access_token: 'gho_supersecret', token_type: 'bearer', scopes: [], connection_id: 'c' }));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${server.address().port}`;
  try {
    const out = await new ConnectClient({ baseUrl: base, apiKey: SECRET }).token({ subject: 'a', provider: 'p' });
    for (const view of views(out)) assert.ok(!view.includes('supersecret'), view);
    const err = await new ConnectClient({ baseUrl: `${base}/refuse`, apiKey: SECRET }).token({ subject: 'a', provider: 'p' }).catch((e) => e);
    assert.equal(err.code, 'invalid_api_key');
    for (const view of [...views(err), err.stack]) assert.ok(!view.includes('supersecret'), view);
  } finally {
    server.close();
  }
});
