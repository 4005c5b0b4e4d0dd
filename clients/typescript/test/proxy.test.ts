// proxyFetch against a real HTTP peer on 127.0.0.1:0 answering as mcp-connect's
// `/v1/proxy/{provider}/{path}` does: the provider's answers as they are (any status,
// streamed), its own with `MCP-Connect-Error` and the API's error body.

import assert from 'node:assert/strict';
import { type IncomingHttpHeaders, type ServerResponse, createServer } from 'node:http';
import { after, test } from 'node:test';
import { format, inspect } from 'node:util';
import {
  ApiError,
  ConnectClient,
  ConnectError,
  ConnectRequiredError,
  InvalidResponseError,
  SubjectToken,
  TransportError,
  UnavailableError,
} from '@mcp-connect/client';
import { listen, settled } from './helpers.js';

const KEY = 'mcpc_0123456789abcdef_supersecret';
const ID = '0b5c2a1e-7c1d-4b8e-9a55-2f0e1c9d8a77';

/** What the peer received: the request target as sent, its headers and body. */
interface Seen {
  method: string;
  target: string;
  headers: IncomingHttpHeaders;
  body: string;
}
type Answer = (seen: Seen, res: ServerResponse) => void | Promise<void>;

/** The provider's answer: what it got. */
const echo: Answer = (seen, res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ method: seen.method, target: seen.target, body: seen.body }));
};

/** One of the proxy's own answers: `MCP-Connect-Error` and the API's error body. */
const own =
  (status: number, code: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}): Answer =>
  (_seen, res) => {
    res.writeHead(status, { 'content-type': 'application/json', 'mcp-connect-error': code, ...headers });
    res.end(JSON.stringify({ error: code, error_description: `refused: ${code}`, ...extra }));
  };

const link = { id: ID, url: `https://connect.example/connect/github?e=${ID}`, expires_at: '2030-01-01T00:10:00Z' };
/** `/v1/token`'s connect_required answer, which the proxy's 428 carries. */
const connectRequired = {
  status: 'connect_required',
  elicitation: link,
  mcp: { mode: 'url', message: 'Whoami Tools needs access to your GitHub account.', url: link.url, elicitationId: ID },
  provider_name: 'GitHub',
};

/** A peer answering every request with `answer`; `firstChunk` settles when a body's first bytes arrive. */
async function fakeProxy(answer: Answer = echo) {
  const seen: Seen[] = [];
  let arrived = () => {};
  const firstChunk = new Promise<void>((r) => (arrived = r));
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      chunks.push(c);
      arrived();
    });
    req.on('end', () => {
      const s = { method: req.method ?? '', target: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString() };
      seen.push(s);
      void Promise.resolve(answer(s, res));
    });
  });
  const url = await listen(server);
  after(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url, seen, firstChunk };
}

const client = (url: string) => new ConnectClient({ baseUrl: url, apiKey: KEY, retry: { defaultDelayMs: 10 } });
/** The one request the peer got. */
function only(seen: Seen[]): Seen {
  assert.equal(seen.length, 1, JSON.stringify(seen.map((s) => s.target)));
  const [s] = seen;
  assert.ok(s);
  return s;
}
const bytes = (s: string) => new TextEncoder().encode(s);
/** `%s %o %O %j`, String, JSON, inspect: where a careless log line could show a secret. */
const views = (v: unknown) => [
  String(v),
  // eslint-disable-next-line @typescript-eslint/restrict-template-expressions -- what a careless log line does
  `${v}`,
  (JSON.stringify(v) as string | undefined) ?? '', // undefined for a function (a ProxyFetch)
  inspect(v, { showHidden: true, depth: 9 }),
  format('%s %o %O %j', v, v, v, v),
];

test('a path goes to /v1/proxy/<provider> with the server key and the MCP-Connect-* headers, the subject percent-encoded', async () => {
  const p = await fakeProxy();
  const fetch = client(`${p.url}/prefix`).proxyFetch({
    provider: 'github',
    subject: 'zoë/x y',
    subjectToken: new SubjectToken('the-users-mcp-token'),
    scopes: ['repo', 'read:user', '100%'],
    elicitationId: ID,
    serverName: 'Whoami Tools',
    origin: 'https://uploads.example.com',
  });
  const headers = { accept: 'application/vnd.github+json', authorization: 'Bearer the-callers-own', 'mcp-connect-subject': 'mallory', 'x-keep': 'yes' };
  const r = await fetch('/repos/o/r/issues?state=open&q=a%20b#fragment', { headers });
  assert.equal(r.status, 200);
  assert.deepEqual(await r.json(), { method: 'GET', target: '/prefix/v1/proxy/github/repos/o/r/issues?state=open&q=a%20b', body: '' });
  const h = only(p.seen).headers;
  assert.equal(h.authorization, `Bearer ${KEY}`, "the server key, never the caller's authorization");
  assert.equal(h['mcp-connect-subject'], 'zo%C3%AB%2Fx%20y', "ours, percent-encoded UTF-8, not the caller's");
  assert.equal(h['mcp-connect-subject-token'], 'the-users-mcp-token');
  assert.equal(h['mcp-connect-scopes'], 'repo read:user 100%25', 'space-separated, a % encoded (mcp-connect decodes the header)');
  assert.equal(h['mcp-connect-elicitation-id'], ID);
  assert.equal(h['mcp-connect-server-name'], 'Whoami%20Tools');
  assert.equal(h['mcp-connect-origin'], 'https://uploads.example.com');
  assert.deepEqual([h.accept, h['x-keep']], ['application/vnd.github+json', 'yes'], "the caller's other headers go along");
});

test('a body goes as it is (with its length), and only the headers that are set', async () => {
  const p = await fakeProxy();
  const fetch = client(p.url).proxyFetch({ provider: 'github', subjectToken: new SubjectToken('tok') });
  const r = await fetch('/user/repos', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"x"}' });
  assert.deepEqual(await r.json(), { method: 'POST', target: '/v1/proxy/github/user/repos', body: '{"name":"x"}' });
  const h = only(p.seen).headers;
  assert.equal(h['content-length'], '12', 'a string body is not turned into a chunked one');
  assert.equal(h['content-type'], 'application/json');
  for (const unset of ['mcp-connect-subject', 'mcp-connect-scopes', 'mcp-connect-elicitation-id', 'mcp-connect-server-name', 'mcp-connect-origin']) {
    assert.equal(h[unset], undefined, unset);
  }
});

test('a Request or a URL under the proxy goes too: its method, headers and body', async () => {
  const p = await fakeProxy();
  const fetch = client(p.url).proxyFetch({ provider: 'github', subject: 'alice' });
  const base = `${p.url}/v1/proxy/github`;
  const request = new Request(`${base}/user`, { method: 'PATCH', headers: { 'content-type': 'application/json', authorization: 'token gho_x' }, body: '{"bio":"b"}' });
  assert.deepEqual(await (await fetch(request)).json(), { method: 'PATCH', target: '/v1/proxy/github/user', body: '{"bio":"b"}' });
  const { headers } = only(p.seen);
  assert.deepEqual([headers.authorization, headers['content-type']], [`Bearer ${KEY}`, 'application/json'], "the server key, not the Request's own");
  assert.deepEqual(await (await fetch(new URL(`${base}/user?x=1`))).json(), { method: 'GET', target: '/v1/proxy/github/user?x=1', body: '' });
  assert.deepEqual(await (await fetch(`${base}/user`, { method: 'DELETE' })).json(), { method: 'DELETE', target: '/v1/proxy/github/user', body: '' });
});

test("the provider's answers come back as they are, any status: a provider 401, a 500, a redirect (not followed)", async () => {
  const elsewhere = await fakeProxy();
  const answers: Record<string, Answer> = {
    '/v1/proxy/github/user': (_s, res) => {
      res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer realm="GitHub"' });
      res.end('{"message":"Bad credentials"}');
    },
    '/v1/proxy/github/broken': (_s, res) => {
      res.writeHead(500, { 'content-type': 'text/plain' });
      res.end('oops');
    },
    '/v1/proxy/github/moved': (_s, res) => {
      res.writeHead(302, { location: `${elsewhere.url}/steal` });
      res.end();
    },
  };
  const p = await fakeProxy((s, res) => answers[s.target]?.(s, res));
  const fetch = client(p.url).proxyFetch({ provider: 'github', subject: 'alice' });
  const r = await fetch('/user');
  assert.equal(r.status, 401, 'no MCP-Connect-Error: the provider refused, and the tool sees it');
  assert.equal(r.headers.get('www-authenticate'), 'Bearer realm="GitHub"');
  assert.deepEqual(await r.json(), { message: 'Bad credentials' });
  const broken = await fetch('/broken');
  assert.deepEqual([broken.status, await broken.text()], [500, 'oops']);
  const moved = await fetch('/moved', { redirect: 'follow' });
  assert.equal(moved.status, 302);
  assert.equal(moved.headers.get('location'), `${elsewhere.url}/steal`);
  assert.equal(elsewhere.seen.length, 0, 'a redirect is never followed (it would carry the subject token along)');
});

test('428 connect_required rejects with ConnectRequiredError carrying the connect_required answer', async () => {
  const p = await fakeProxy(own(428, 'connect_required', connectRequired));
  const fetch = client(p.url).proxyFetch({ provider: 'github', subject: 'alice' });
  const err = await settled(fetch('/user'));
  assert.ok(err instanceof ConnectRequiredError, String(err));
  assert.ok(err instanceof ConnectError);
  assert.deepEqual([err.name, err.code, err.status, err.provider], ['ConnectRequiredError', 'connect_required', 428, 'github']);
  assert.deepEqual(err.outcome, {
    status: 'connect_required',
    elicitation: { id: ID, url: link.url, expiresAt: new Date(link.expires_at) },
    mcp: connectRequired.mcp,
    providerName: 'GitHub',
  });
  assert.ok(!err.message.includes(link.url), 'the link is for the user only, not for a log line');
  for (const view of [...views(err), err.stack ?? '']) assert.ok(!view.includes('supersecret'), view);
  // A 428 that does not carry the answer is not what the API documents.
  const q = await fakeProxy(own(428, 'connect_required'));
  assert.ok((await settled(client(q.url).proxyFetch({ provider: 'github', subject: 'alice' })('/user'))) instanceof InvalidResponseError);
});

test("the proxy's other answers reject with ApiError and its code; 503 with UnavailableError; nothing is sent again", async () => {
  const cases: Array<[number, string]> = [
    [400, 'proxy_path_refused'],
    [403, 'proxy_path_not_allowed'],
    [403, 'connect_declined'],
    [405, 'proxy_method_not_allowed'],
    [413, 'payload_too_large'],
    [502, 'upstream_unreachable'],
    [504, 'upstream_timeout'],
  ];
  for (const [status, code] of cases) {
    const p = await fakeProxy(own(status, code));
    const err = await settled(client(p.url).proxyFetch({ provider: 'github', subject: 'alice' })('/user'));
    assert.ok(err instanceof ApiError, `${code}: ${String(err)}`);
    assert.deepEqual([err.status, err.code, err.description], [status, code, `refused: ${code}`]);
    for (const view of [...views(err), err.stack ?? '']) assert.ok(!view.includes('supersecret'), view);
  }
  const p = await fakeProxy(own(503, 'provider_unavailable', {}, { 'retry-after': '7' }));
  const err = await settled(client(p.url).proxyFetch({ provider: 'github', subject: 'alice' })('/user', { method: 'POST', body: 'x' }));
  assert.ok(err instanceof UnavailableError);
  assert.deepEqual([err.code, err.retryAfterMs], ['provider_unavailable', 7000]);
  assert.equal(p.seen.length, 1, 'a proxied request is the caller\'s to send again');
});

test('a streaming request body is sent as it is produced (duplex half, without the caller asking)', { timeout: 10_000 }, async () => {
  const p = await fakeProxy();
  const fetch = client(p.url).proxyFetch({ provider: 'github', subject: 'alice' });
  let n = 0;
  const body = new ReadableStream<Uint8Array>({
    async pull(c) {
      n++;
      if (n === 1) c.enqueue(bytes('one,'));
      else if (n === 2) {
        await p.firstChunk; // produced only once the first chunk reached the peer: nothing buffered whole
        c.enqueue(bytes('two'));
      } else c.close();
    },
  });
  const r = await fetch('/upload', { method: 'POST', body });
  assert.deepEqual(await r.json(), { method: 'POST', target: '/v1/proxy/github/upload', body: 'one,two' });
  assert.equal(only(p.seen).headers['transfer-encoding'], 'chunked');
  // The same from a Request holding a stream.
  const q = await fakeProxy();
  const streamed = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(bytes('from a request'));
      c.close();
    },
  });
  const request = new Request(`${q.url}/v1/proxy/github/upload`, { method: 'PUT', body: streamed, duplex: 'half' } as RequestInit);
  const rq = await client(q.url).proxyFetch({ provider: 'github', subject: 'alice' })(request);
  assert.deepEqual(await rq.json(), { method: 'PUT', target: '/v1/proxy/github/upload', body: 'from a request' });
});

test('a streaming answer is passed on as the provider sends it', { timeout: 10_000 }, async () => {
  let release = () => {};
  const released = new Promise<void>((r) => (release = r));
  const p = await fakeProxy(async (_s, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: one\n\n');
    await released; // the second event waits for the test
    res.end('data: two\n\n');
  });
  const r = await client(p.url).proxyFetch({ provider: 'github', subject: 'alice' })('/events', { headers: { accept: 'text/event-stream' } });
  assert.equal(r.headers.get('content-type'), 'text/event-stream');
  assert.ok(r.body);
  const reader = r.body.getReader();
  const first = await reader.read();
  assert.equal(new TextDecoder().decode(first.value), 'data: one\n\n', 'the first event arrives while the provider holds the second');
  release();
  let rest = '';
  for (let c = await reader.read(); !c.done; c = await reader.read()) rest += new TextDecoder().decode(c.value);
  assert.equal(rest, 'data: two\n\n');
});

test('a target that would leave the proxy, or that a URL parser would rewrite, is refused before anything is sent', async () => {
  const p = await fakeProxy();
  const fetch = client(p.url).proxyFetch({ provider: 'github', subject: 'alice' });
  const other = p.url.replace('127.0.0.1', 'localhost');
  const refused: Array<string | URL | Request> = [
    'https://api.github.com/user', // another host: the server key and the subject token would go there
    new URL('https://api.github.com/user'),
    new Request('https://api.github.com/user'),
    '//api.github.com/user', // scheme-relative: another host too
    'user', // not a path
    '',
    '/a/../b',
    '/a/./b',
    '/a/..',
    '/a/%2e%2e/b', // a URL parser reads %2e as a dot
    '/a/.%2E/b',
    '/a/%2E/b',
    '/a/..;x/b',
    '/a\\..\\b', // a backslash reads as a slash
    '/a//b',
    '/.\t./.\t./token', // fetch drops tabs and line breaks, then reads ../../token
    '/.%2\te/.%2\te/token',
    '/a\n/../../token',
    '/a b',
    '/user?q=\t',
    `${p.url}/v1/proxy/github/a/../b`,
    `${p.url}/v1/token`, // mcp-connect, but not this provider's proxy
    `${p.url}/v1/proxy/gitlab/user`,
    `${p.url}/v1/proxy/github`,
    `${p.url}/v1/proxy/githubx/user`,
    `${other}/v1/proxy/github/user`, // the same machine under another name is another origin
  ];
  for (const target of refused) {
    const err = await settled(fetch(target));
    const named = typeof target === 'string' ? target : target instanceof URL ? target.href : `Request(${target.url})`;
    assert.ok(err instanceof TypeError, `${named}: ${String(err)}`);
    assert.ok(!err.message.includes('supersecret'));
  }
  assert.match(String(await settled(fetch('https://api.github.com/user'))), /a path \('\/user'\)/);
  assert.equal(p.seen.length, 0);
});

test("proxyFetch's options are checked when it is made; the fetch never prints the key", () => {
  const c = client('http://127.0.0.1:9');
  const bad: Array<[string, Parameters<ConnectClient['proxyFetch']>[0]]> = [
    ['no subject', { provider: 'github' }],
    ['provider', { provider: 'GitHub', subject: 'a' }],
    ['provider', { provider: '../token', subject: 'a' }],
    ['provider', { provider: '', subject: 'a' }],
    ['subject', { provider: 'github', subject: '' }],
    ['subject', { provider: 'github', subject: 'a\ud800' }],
    ['serverName', { provider: 'github', subject: 'a', serverName: 'Who\u202eami' }],
    ['scopes', { provider: 'github', subject: 'a', scopes: ['a b'] }],
    ['scopes', { provider: 'github', subject: 'a', scopes: [''] }],
    ['elicitationId', { provider: 'github', subject: 'a', elicitationId: 'a b' }],
    ['origin', { provider: 'github', subject: 'a', origin: 'https://uploads.example.com/path' }],
    ['origin', { provider: 'github', subject: 'a', origin: 'ftp://uploads.example.com' }],
    ['origin', { provider: 'github', subject: 'a', origin: 'not a url' }],
  ];
  for (const [what, options] of bad) assert.throws(() => c.proxyFetch(options), TypeError, `${what}: ${JSON.stringify(options)}`);
  const fetch = c.proxyFetch({ provider: 'github', subject: 'alice', subjectToken: new SubjectToken('the-users-mcp-token') });
  for (const view of views(fetch)) assert.ok(!view.includes('supersecret') && !view.includes('the-users-mcp-token'), view);
  assert.equal(String(fetch), 'ProxyFetch(http://127.0.0.1:9, github)');
});

test("the caller's abort rejects as fetch's own; an unreachable mcp-connect is a TransportError without the key", async () => {
  const p = await fakeProxy(() => {}); // never answers
  const fetch = client(p.url).proxyFetch({ provider: 'github', subject: 'alice' });
  const aborted = await settled(fetch('/user', { signal: AbortSignal.timeout(100) }));
  assert.ok(aborted instanceof Error && aborted.name === 'TimeoutError', String(aborted));
  const controller = new AbortController();
  const pending = fetch('/user', { signal: controller.signal });
  controller.abort();
  const err = await settled(pending);
  assert.ok(err instanceof Error && err.name === 'AbortError', String(err));
  const down = await settled(client('http://127.0.0.1:9').proxyFetch({ provider: 'github', subject: 'alice' })('/user'));
  assert.ok(down instanceof TransportError, String(down));
  assert.equal(down.code, 'unavailable');
  for (const view of [...views(down), down.stack ?? '']) assert.ok(!view.includes('supersecret'), view);
});
