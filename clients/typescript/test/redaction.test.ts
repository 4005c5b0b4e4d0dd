// Secrets never show in strings, JSON, util.inspect, console output or errors.

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test } from 'node:test';
import { format, inspect } from 'node:util';
import { AccessToken, ApiKey, ConnectClient, RequestStateKey } from '@mcp-connect/client';
import { listen, settled } from './helpers.js';

const SECRET = 'mcpc_0123456789abcdef_supersecret';

// `${v}` and String(v) are what a careless log line does: exactly what is under test.
// eslint-disable-next-line @typescript-eslint/restrict-template-expressions
const views = (v: unknown) => [String(v), `${v}`, JSON.stringify(v), JSON.stringify({ v }), inspect(v), inspect({ nested: { v } }, { depth: 9, showHidden: true }), format('%s %o %O %j', v, v, v, v)];

test('ApiKey and AccessToken print a placeholder everywhere and reveal() on request', () => {
  for (const s of [new ApiKey(SECRET), new AccessToken(SECRET)]) {
    for (const view of views(s)) assert.ok(!view.includes('supersecret'), view);
    assert.equal(s.reveal(), SECRET);
    assert.deepEqual(Object.keys(s), []);
    // eslint-disable-next-line @typescript-eslint/no-misused-spread -- spreading is what is under test
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
    const refused = req.url?.includes('refuse') ?? false;
    res.writeHead(refused ? 401 : 200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(refused ? { error: 'invalid_api_key', error_description: 'unknown key' } : { status: 'connected', access_token: 'gho_supersecret', token_type: 'bearer', scopes: [], connection_id: 'c' }));
  });
  const base = await listen(server);
  try {
    const out = await new ConnectClient({ baseUrl: base, apiKey: SECRET }).token({ subject: 'a', provider: 'p' });
    for (const view of views(out)) assert.ok(!view.includes('supersecret'), view);
    const err = (await settled(new ConnectClient({ baseUrl: `${base}/refuse`, apiKey: SECRET }).token({ subject: 'a', provider: 'p' }))) as Error & { code: unknown };
    assert.equal(err.code, 'invalid_api_key');
    for (const view of [...views(err), err.stack ?? '']) assert.ok(!view.includes('supersecret'), view);
  } finally {
    server.close();
  }
});
