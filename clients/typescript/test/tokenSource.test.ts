// Workload identity (issue 44): a token source in the API key's place. A token file is read
// again when it is replaced (as the kubelet rotates a projected token), a token function is
// called for each request, each request carries the token as it is when it leaves (asserted
// on what a real HTTP peer on 127.0.0.1 received), and neither the source nor the token prints.

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readlinkSync, renameSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { format, inspect } from 'node:util';
import { ConnectClient, ConnectError, MissingSettingError, TokenFile, type TokenSource, WorkloadToken, WorkloadTokenError } from '@mcp-connect/client';
import { listen, settled } from './helpers.js';

// Shaped as the JWTs a platform hands out; the server tells them from an API key by shape.
const FIRST = 'eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJmaXJzdCJ9.c2lnbmF0dXJlLWZpcnN0';
const SECOND = 'eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJzZWNvbmQifQ.c2lnbmF0dXJlLXNlY29uZA';
const connected = { status: 'connected', access_token: 'gho_tok', token_type: 'bearer', expires_at: null, scopes: [], connection_id: 'c1' };
const ALICE = { subject: 'alice', provider: 'github' };

/** A peer answering `connected` (503 first, as many times as asked), recording each request's path and Authorization. */
async function peer(busyFirst = 0): Promise<{ url: string; seen: { url: string | undefined; auth: string | undefined }[] }> {
  const seen: { url: string | undefined; auth: string | undefined }[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      seen.push({ url: req.url, auth: req.headers.authorization });
      const busy = seen.length <= busyFirst;
      res.writeHead(busy ? 503 : 200, { 'content-type': 'application/json', ...(busy && { 'retry-after': '0' }) });
      res.end(JSON.stringify(busy ? { error: 'temporarily_unavailable', error_description: '' } : connected));
    });
  });
  const url = await listen(server);
  after(() => server.close());
  return { url, seen };
}

function dir(): string {
  const d = mkdtempSync(join(tmpdir(), 'mcpc-token-'));
  after(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

/** A projected volume as the kubelet lays it out: `token -> ..data/token`, `..data` a symlink to a timestamped directory. */
function kubeletVolume(root: string, token: string): string {
  mkdirSync(join(root, '..2026_01_01_00_00_00.1'));
  writeFileSync(join(root, '..2026_01_01_00_00_00.1', 'token'), `${token}\n`);
  symlinkSync('..2026_01_01_00_00_00.1', join(root, '..data'));
  symlinkSync('..data/token', join(root, 'token'));
  return join(root, 'token');
}

/** The kubelet's atomic update: a new directory, `..data` swapped to it by a rename over it, the old one removed. */
function kubeletRotate(root: string, token: string, n: number): void {
  const old = readlinkSync(join(root, '..data'));
  const next = `..2026_01_01_00_00_0${n}.1`;
  mkdirSync(join(root, next));
  writeFileSync(join(root, next, 'token'), `${token}\n`);
  symlinkSync(next, join(root, '..data_tmp'));
  renameSync(join(root, '..data_tmp'), join(root, '..data'));
  rmSync(join(root, old), { recursive: true });
}

/** A new file moved into place (a rename over the old one). */
function replaceFile(path: string, token: string): void {
  writeFileSync(`${path}.tmp`, token);
  renameSync(`${path}.tmp`, path);
}

for (const rotation of ['kubelet symlink swap', 'rename'] as const) {
  test(`a token file replaced by a ${rotation} is read again and the next request carries the new token`, async () => {
    const root = dir();
    let path = join(root, 'token');
    if (rotation === 'rename') writeFileSync(path, `  ${FIRST}\n`);
    else path = kubeletVolume(root, FIRST);
    const p = await peer();
    const client = new ConnectClient({ baseUrl: p.url, token: new TokenFile(path) });
    assert.equal((await client.token(ALICE)).status, 'connected');
    await client.token(ALICE);
    if (rotation === 'rename') replaceFile(path, SECOND);
    else kubeletRotate(root, SECOND, 1);
    await client.token(ALICE);
    await client.token(ALICE);
    assert.deepEqual(
      p.seen.map((s) => s.auth),
      [`Bearer ${FIRST}`, `Bearer ${FIRST}`, `Bearer ${SECOND}`, `Bearer ${SECOND}`],
    );
  });
}

test('a token file whose inode, modification time and size are unchanged is not read again', async () => {
  const path = join(dir(), 'token');
  writeFileSync(path, FIRST);
  utimesSync(path, 1_700_000_000, 1_700_000_000);
  const source = new TokenFile(path);
  assert.equal((await source.read()).reveal(), FIRST);
  // Rewritten in place to the same size and time: only the stat is compared.
  writeFileSync(path, FIRST.replace('c2ln', 'XXXX'));
  utimesSync(path, 1_700_000_000, 1_700_000_000);
  assert.equal((await source.read()).reveal(), FIRST, 'the token held, without reading the file');
  utimesSync(path, 1_700_000_001, 1_700_000_001);
  assert.equal((await source.read()).reveal(), FIRST.replace('c2ln', 'XXXX'), 'a new modification time: read again');
});

test("the proxy's requests carry the token source's current token too", async () => {
  const path = join(dir(), 'token');
  writeFileSync(path, FIRST);
  const p = await peer();
  const client = new ConnectClient({ baseUrl: p.url, token: new TokenFile(path) });
  const github = client.proxyFetch({ provider: 'github', subject: 'alice' });
  await (await github('/user')).text();
  replaceFile(path, SECOND);
  await (await github('/user')).text();
  assert.deepEqual(p.seen, [
    { url: '/v1/proxy/github/user', auth: `Bearer ${FIRST}` },
    { url: '/v1/proxy/github/user', auth: `Bearer ${SECOND}` },
  ]);
});

test('a token function is called for each request and each retry; an async one is awaited', async () => {
  let calls = 0;
  const p = await peer(1);
  const client = new ConnectClient({ baseUrl: p.url, token: () => `${FIRST}-${++calls}`, retry: { defaultDelayMs: 10 } });
  await client.token(ALICE);
  await client.token(ALICE);
  assert.equal(calls, 3, 'the first request and its retry, then the second');
  assert.deepEqual(
    p.seen.map((s) => s.auth),
    [1, 2, 3].map((n) => `Bearer ${FIRST}-${n}`),
  );
  const tokens = [FIRST, new WorkloadToken(SECOND)];
  const q = await peer();
  const asynchronous = new ConnectClient({ baseUrl: q.url, token: () => Promise.resolve(tokens.shift() ?? '') });
  await asynchronous.token(ALICE);
  await asynchronous.token(ALICE);
  assert.deepEqual(
    q.seen.map((s) => s.auth),
    [`Bearer ${FIRST}`, `Bearer ${SECOND}`],
  );
});

const FILE_CASES: [string, (path: string) => void, (path: string) => string][] = [
  ['missing', () => {}, (path) => `cannot read the token file ${path}: no such file or directory`],
  ['a directory', (path) => mkdirSync(path), (path) => `cannot read the token file ${path}: illegal operation on a directory`],
  ['empty', (path) => writeFileSync(path, ' \n\t\n'), (path) => `the token file ${path} is empty`],
  ['two words', (path) => writeFileSync(path, `${FIRST} ${SECOND}`), (path) => `the token file ${path} holds no token (a token is one line of visible ASCII, without spaces)`],
  ['binary', (path) => writeFileSync(path, Buffer.concat([Buffer.from(FIRST), Buffer.from([0xff, 0xfe])])), (path) => `the token file ${path} holds no token (it is not ASCII text)`],
  ['too large', (path) => writeFileSync(path, FIRST.repeat(2000)), (path) => `the token file ${path} is larger than 64 KiB: it holds no token`],
];

for (const [name, make, message] of FILE_CASES) {
  test(`a token file that is ${name} rejects with WorkloadTokenError naming the file, never the token; nothing is sent`, async () => {
    const path = join(dir(), 'token');
    make(path);
    const p = await peer();
    const err = await settled(new ConnectClient({ baseUrl: p.url, token: new TokenFile(path) }).token(ALICE));
    assert.ok(err instanceof WorkloadTokenError && err instanceof ConnectError, String(err));
    assert.equal(err.message, message(path));
    assert.equal(err.code, 'unavailable');
    for (const view of [String(err), inspect(err), err.stack ?? '']) assert.ok(!view.includes('eyJ') && !view.includes('c2ln'), view);
    assert.deepEqual(p.seen, [], 'nothing was sent');
  });
}

test('a token file that turns empty is an error, not the old token; the next good file is read', async () => {
  const path = join(dir(), 'token');
  writeFileSync(path, FIRST);
  const source = new TokenFile(path);
  assert.equal((await source.read()).reveal(), FIRST);
  replaceFile(path, '\n');
  const err = await settled(source.read());
  assert.ok(err instanceof WorkloadTokenError && /is empty$/.test(err.message) && !err.message.includes(FIRST));
  replaceFile(path, SECOND);
  assert.equal((await source.read()).reveal(), SECOND);
});

const FUNCTION_CASES: [string, TokenSource, string][] = [
  [
    'throws',
    () => {
      throw new RangeError(`the platform's agent is down (last token ${FIRST})`);
    },
    'the token function threw RangeError',
  ],
  ['rejects', () => Promise.reject(new Error(FIRST)), 'the token function threw Error'],
  ['returns an empty token', () => '  ', 'the token function returned an empty token'],
  ['returns undefined', (() => undefined) as unknown as TokenSource, 'the token function returned undefined, not the token (a string)'],
  ['returns two lines', () => `${FIRST}\nx`, 'the token function holds no token (a token is one line of visible ASCII, without spaces)'],
];

for (const [name, token, message] of FUNCTION_CASES) {
  test(`a token function that ${name} rejects with WorkloadTokenError; nothing is sent`, async () => {
    const p = await peer();
    const err = await settled(new ConnectClient({ baseUrl: p.url, token }).token(ALICE));
    assert.ok(err instanceof WorkloadTokenError, String(err));
    assert.equal(err.message, message);
    assert.ok(!String(err).includes(FIRST));
    if (name === 'throws') assert.ok(err.cause instanceof RangeError, "the function's own error is the cause");
    assert.deepEqual(p.seen, []);
  });
}

test('exactly one of apiKey and token; a token is a TokenFile or a function', () => {
  const baseUrl = 'https://connect.example';
  // @ts-expect-error -- both is refused by the type, and at run time for untyped callers
  assert.throws(() => new ConnectClient({ baseUrl, apiKey: 'mcpc_k_s', token: () => FIRST }), /not both/);
  // @ts-expect-error -- neither
  assert.throws(() => new ConnectClient({ baseUrl }), MissingSettingError);
  for (const wrong of ['/var/run/secrets/tokens/mcp-connect', { file: '/x' }, new WorkloadToken(FIRST)]) {
    assert.throws(() => new ConnectClient({ baseUrl, token: wrong as unknown as TokenSource }), /TokenFile/);
  }
  assert.throws(() => new TokenFile(''), TypeError);
});

// `${v}` and String(v) are what a careless log line does: exactly what is under test.
// eslint-disable-next-line @typescript-eslint/restrict-template-expressions
const views = (v: unknown) => [String(v), `${v}`, JSON.stringify(v), JSON.stringify({ v }), inspect(v), inspect({ nested: { v } }, { depth: 9, showHidden: true }), format('%s %o %O %j', v, v, v, v)];

test('a token source, its token and a client with either never print the token', async () => {
  const path = join(dir(), 'token');
  writeFileSync(path, FIRST);
  const source = new TokenFile(path);
  const token = await source.read();
  assert.ok(token instanceof WorkloadToken && token.reveal() === FIRST);
  assert.equal(String(token), 'WorkloadToken([REDACTED])');
  assert.equal(String(source), `TokenFile(${path})`);
  assert.equal(inspect(source), `TokenFile(${path})`);
  assert.equal(source.path, path);
  for (const v of [source, token, new ConnectClient({ baseUrl: 'https://connect.example', token: source }), new ConnectClient({ baseUrl: 'https://connect.example', token: () => FIRST })]) {
    for (const view of views(v)) assert.ok(!view.includes('c2ln'), view);
  }
});

test('fromEnv takes MCP_CONNECT_TOKEN_FILE where no key is set; a key that is set wins', async () => {
  const path = join(dir(), 'token');
  writeFileSync(path, FIRST);
  const p = await peer();
  for (const env of [
    { MCP_CONNECT_URL: p.url, MCP_CONNECT_TOKEN_FILE: path },
    { MCP_CONNECT_URL: p.url, MCP_CONNECT_API_KEY: ' ', MCP_CONNECT_TOKEN_FILE: ` ${path} ` },
    { MCP_CONNECT_URL: p.url, MCP_CONNECT_API_KEY: 'mcpc_0123456789abcdef_key', MCP_CONNECT_TOKEN_FILE: path },
  ]) {
    await ConnectClient.fromEnv(env).token(ALICE);
  }
  assert.deepEqual(
    p.seen.map((s) => s.auth),
    [`Bearer ${FIRST}`, `Bearer ${FIRST}`, 'Bearer mcpc_0123456789abcdef_key'],
  );
  for (const env of [{ MCP_CONNECT_URL: p.url }, { MCP_CONNECT_URL: p.url, MCP_CONNECT_API_KEY: '', MCP_CONNECT_TOKEN_FILE: ' ' }]) {
    assert.throws(
      () => ConnectClient.fromEnv(env),
      (e) => e instanceof MissingSettingError && e.message.startsWith('MCP_CONNECT_API_KEY is not set: ') && e.message.includes('MCP_CONNECT_TOKEN_FILE'),
    );
  }
});
