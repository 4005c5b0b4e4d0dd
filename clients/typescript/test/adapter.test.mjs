// The adapters with real SDK objects end to end: the official clients (2.4 for 2026-07-28,
// 1.32 for 2025-11-25) talk to the official servers (McpServer 2.4 behind
// createConnectHandler, McpServer 1.32) over their Streamable HTTP transports (the
// clients' fetch goes to the handler in-process), and the adapters ask a real HTTP peer on
// 127.0.0.1:0 that answers as mcp-connect does. The decision table first.

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, describe, test } from 'node:test';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { McpServer, fromJsonSchema } from '@modelcontextprotocol/server';
import { Client as LegacyClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as LegacyTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpServer as McpServer132 } from '@modelcontextprotocol/sdk/server/mcp.js';
import { WebStandardStreamableHTTPServerTransport as Transport132 } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { ElicitationCompleteNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { ConnectClient, RequestStateKey, openRequestState, sealRequestState, urlElicitation } from '../dist/index.js';
import { McpConnect, createConnectHandler } from '../dist/server.js';
import { McpConnect as McpConnect132 } from '../dist/sdk.js';

test('the decision table: revision x capabilities', () => {
  const url = { elicitation: { form: {}, url: {} } };
  const rows = [
    ['2026-07-28', url, 'input_required'],
    ['2026-09-01', url, 'input_required'],
    ['2025-11-25', url, 'error_32042'],
    ['2025-06-18', url, 'setup_link'], // no URL mode yet, whatever the client claims
    ['2024-11-05', url, 'setup_link'],
    [undefined, url, 'setup_link'],
    ['2026-07-28', { elicitation: { form: {} } }, 'setup_link'], // form only is not URL support
    ['2026-07-28', { elicitation: {} }, 'setup_link'],
    ['2026-07-28', {}, 'setup_link'],
    ['2026-07-28', undefined, 'setup_link'],
    ['2025-11-25', { elicitation: { form: {} } }, 'setup_link'],
    ['2025-11-25', {}, 'setup_link'],
  ];
  for (const [revision, caps, want] of rows) assert.equal(urlElicitation(revision, caps), want, `${revision} ${JSON.stringify(caps)}`);
});

// --- A peer that answers as mcp-connect ------------------------------------------------

const uuid = (n) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

async function fakeConnect() {
  const state = { elicitations: new Map(), connected: new Set(), calls: [], refuse: undefined, n: 0 };
  const server = createServer((req, res) => {
    let text = '';
    req.on('data', (c) => (text += c));
    req.on('end', async () => {
      const url = new URL(req.url, 'http://x');
      const body = text ? JSON.parse(text) : undefined;
      state.calls.push({ method: req.method, path: url.pathname, query: url.search, body, auth: req.headers.authorization });
      const send = (status, v) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(v));
      };
      if (state.refuse) return send(403, { error: state.refuse, error_description: 'refused' });
      const m = url.pathname.match(/^\/v1\/elicitations\/([^/]+)(\/cancel)?$/);
      if (url.pathname === '/v1/token') {
        const key = `${body.subject}/${body.provider}`;
        const e = body.elicitation_id && state.elicitations.get(body.elicitation_id);
        if (state.connected.has(key) || e?.status === 'completed') {
          return send(200, { status: 'connected', access_token: `tok-${body.subject}`, token_type: 'bearer', expires_at: null, scopes: [], account: null, connection_id: uuid(999) });
        }
        if (e?.status === 'declined') return send(200, { status: 'declined', elicitation_id: e.id });
        const el = e && e.status === 'pending' ? e : { id: uuid(++state.n), status: 'pending', subject: body.subject, provider: body.provider };
        state.elicitations.set(el.id, el);
        const link = `http://connect.test/connect/${body.provider}?e=${el.id}`;
        const expires = new Date(Date.now() + 900_000).toISOString();
        return send(200, {
          status: 'connect_required',
          elicitation: { id: el.id, url: link, expires_at: expires },
          mcp: { mode: 'url', message: `Connect ${body.provider}`, url: link, elicitationId: el.id },
        });
      }
      const e = m && state.elicitations.get(decodeURIComponent(m[1]));
      if (!e) return send(404, { error: 'elicitation_not_found', error_description: 'none' });
      if (m[2]) {
        if (e.status === 'pending') Object.assign(e, { status: 'cancelled', cancel_reason: body?.reason ?? null });
        return send(200, { id: e.id, status: e.status, cancel_reason: e.cancel_reason ?? null });
      }
      const until = Date.now() + Number(url.searchParams.get('wait_seconds') ?? 0) * 1000;
      while (e.status === 'pending' && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
      const t = new Date().toISOString();
      send(200, { id: e.id, status: e.status, subject: e.subject, provider: e.provider, scopes: [], created_at: t, expires_at: t, completed_at: null });
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  after(() => server.close());
  const tokenCalls = () => state.calls.filter((c) => c.path === '/v1/token');
  const complete = (id) => {
    const e = state.elicitations.get(id);
    e.status = 'completed';
    state.connected.add(`${e.subject}/${e.provider}`);
  };
  return { url: `http://127.0.0.1:${server.address().port}`, state, tokenCalls, complete };
}

// --- The MCP server under test ------------------------------------------------------------

const stateKey = RequestStateKey.generate();
const inputSchema = fromJsonSchema({ type: 'object', properties: { provider: { type: 'string' } }, required: ['provider'] });
const body = (args, conn) => ({ content: [{ type: 'text', text: `${args.provider}: ${conn.token.reveal()}` }], structuredContent: { connected: true } });

/** Test-side stand-in for the bearer check: `Bearer as-<sub>` is that subject. */
function authOf(headers) {
  const m = /^Bearer as-(.+)$/.exec(new Headers(headers).get('authorization') ?? '');
  return m ? { token: 'opaque', clientId: 'test', scopes: [], expiresAt: 4e9, extra: { sub: m[1] } } : undefined;
}

async function mcpServer(extra = {}, handlerOptions = {}) {
  const connect = await fakeConnect();
  const gate = new McpConnect({ client: new ConnectClient({ baseUrl: connect.url, apiKey: 'mcpc_test_key' }), stateKey, logger: { warn() {} }, ...extra });
  const factory = () => {
    const server = new McpServer({ name: 'test', version: '1' });
    gate.registerTool(server, 'whoami_on', { inputSchema }, { providerArg: 'provider', knownProviders: ['dev'] }, body);
    return server;
  };
  const handler = createConnectHandler(factory, handlerOptions);
  after(() => handler.close());
  const wire = [];
  /** The transports' fetch: straight into the handler, as the bearer check would hand it on. */
  const fetch = async (url, init) => {
    const request = new Request(url, init);
    if (typeof init?.body === 'string') wire.push(JSON.parse(init.body));
    const authInfo = authOf(init?.headers);
    return handler.fetch(request, authInfo ? { authInfo } : {});
  };
  return { connect, fetch, wire, complete: connect.complete };
}

async function modernClient(fetch, { sub = 'alice', capabilities = { elicitation: { form: {}, url: {} } }, answer } = {}) {
  const client = new Client({ name: 't', version: '1' }, { capabilities, versionNegotiation: { mode: { pin: '2026-07-28' } } });
  const prompts = [];
  if (capabilities.elicitation) {
    client.setRequestHandler('elicitation/create', async (request) => {
      prompts.push(request.params);
      return { action: await answer(request.params) };
    });
  }
  await client.connect(new StreamableHTTPClientTransport(new URL('http://mcp.test/mcp'), { fetch, requestInit: { headers: { authorization: `Bearer as-${sub}` } } }));
  after(() => client.close());
  return { client, prompts };
}

async function legacyClient(fetch, { sub = 'alice', capabilities = { elicitation: { form: {}, url: {} } } } = {}) {
  const client = new LegacyClient({ name: 't', version: '1' }, { capabilities });
  const completions = [];
  client.setNotificationHandler(ElicitationCompleteNotificationSchema, (n) => void completions.push(n.params.elicitationId));
  const transport = new LegacyTransport(new URL('http://mcp.test/mcp'), { fetch, requestInit: { headers: { authorization: `Bearer as-${sub}` } } });
  await client.connect(transport);
  after(() => client.close());
  return { client, completions, transport };
}

const text = (r) => r.content.map((c) => c.text).join('');
const eventually = async (f, ms = 5000) => {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 20))) if (f()) return;
  assert.fail('timed out');
};

describe('@modelcontextprotocol/server 2.4, 2026-07-28 clients', () => {
  test('accept, then connected: our mcs2 state is what travels, and the retry waits on the elicitation', async () => {
    const s = await mcpServer();
    const { client, prompts } = await modernClient(s.fetch, {
      answer: async (params) => {
        s.complete(new URL(params.url).searchParams.get('e')); // the user connects in the browser
        return 'accept';
      },
    });
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), 'dev: tok-alice');
    assert.equal(prompts.length, 1);
    assert.deepEqual(Object.keys(prompts[0]).filter((k) => k !== '_meta').sort(), ['message', 'mode', 'url']); // no elicitationId in 2026-07-28
    const [first, retry] = s.connect.tokenCalls();
    assert.deepEqual(first.body, { subject: 'alice', provider: 'dev' });
    const id = new URL(prompts[0].url).searchParams.get('e');
    assert.deepEqual(retry.body, { subject: 'alice', provider: 'dev', elicitation_id: id, wait_seconds: 20 });
    const sent = s.wire.find((m) => m.params?.requestState);
    assert.match(sent.params.requestState, /^mcs2\.[A-Za-z0-9_-]{8}\.[A-Za-z0-9_-]+$/);
    assert.equal(openRequestState(sent.params.requestState, stateKey, { subject: 'alice', tool: 'whoami_on', arguments: { provider: 'dev' } }).elicitationId, id);
    assert.deepEqual(sent.params.inputResponses, { connect: { action: 'accept' } });
  });

  for (const action of ['decline', 'cancel']) {
    test(`${action} closes the link at mcp-connect and ends in "not connected", no new prompt`, async () => {
      const s = await mcpServer();
      const { client, prompts } = await modernClient(s.fetch, { answer: async () => action });
      const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
      assert.equal(text(r), 'Not connected to dev: nothing was shared.');
      assert.deepEqual(r.structuredContent, { connected: false, provider: 'dev', setup_url: null });
      assert.equal(prompts.length, 1);
      const cancel = s.connect.state.calls.find((c) => c.path.endsWith('/cancel'));
      assert.deepEqual(cancel.body, { reason: action });
      assert.equal(s.connect.tokenCalls().length, 1, 'mcp-connect is not asked again');
    });
  }

  test('a pending retry answers input_required again with a fresh state', async () => {
    const s = await mcpServer({ waitSeconds: 1 });
    const { client } = await modernClient(s.fetch, { answer: async () => 'accept' });
    const first = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } }, { allowInputRequired: true });
    assert.equal(first.resultType, 'input_required');
    const again = await client.callTool(
      { name: 'whoami_on', arguments: { provider: 'dev' }, requestState: first.requestState, inputResponses: { connect: { action: 'accept' } } },
      { allowInputRequired: true },
    );
    assert.equal(again.resultType, 'input_required');
    assert.equal(again.inputRequests.connect.params.url, first.inputRequests.connect.params.url, 'the same elicitation');
    assert.equal(s.connect.tokenCalls()[1].body.wait_seconds, 1);
  });

  test('a tampered, foreign or misplaced requestState is -32602 naming requestState, and nothing is asked', async () => {
    const s = await mcpServer();
    const { client } = await modernClient(s.fetch, { answer: async () => 'accept' });
    const first = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } }, { allowInputRequired: true });
    const st = first.requestState;
    const flipped = st.slice(0, -2) + (st.at(-2) === 'A' ? 'B' : 'A') + st.at(-1);
    const bob = await modernClient(s.fetch, { sub: 'bob', answer: async () => 'accept' });
    const foreign = sealForeign();
    const cases = [
      [client, flipped, { provider: 'dev' }, 'requestState does not belong to this call'],
      [bob.client, st, { provider: 'dev' }, 'requestState does not belong to this call'], // another user's state
      [client, foreign, { provider: 'dev' }, 'requestState does not belong to this call'], // another server's key
      [client, 'garbage', { provider: 'dev' }, 'requestState is malformed'],
    ];
    const before = s.connect.tokenCalls().length;
    for (const [c, requestState, args, message] of cases) {
      const err = await c
        .callTool({ name: 'whoami_on', arguments: args, requestState, inputResponses: { connect: { action: 'accept' } } }, { allowInputRequired: true })
        .catch((e) => e);
      assert.equal(err.code, -32602, String(err));
      assert.match(err.message, new RegExp(message));
    }
    assert.equal(s.connect.tokenCalls().length, before);
  });

  test('an expired state starts over instead of failing', async () => {
    let now = Date.now() / 1000;
    const s = await mcpServer({ now: () => now });
    const { client } = await modernClient(s.fetch, { answer: async () => 'accept' });
    const first = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } }, { allowInputRequired: true });
    now += 601;
    const again = await client.callTool(
      { name: 'whoami_on', arguments: { provider: 'dev' }, requestState: first.requestState, inputResponses: { connect: { action: 'accept' } } },
      { allowInputRequired: true },
    );
    assert.equal(again.resultType, 'input_required');
    assert.deepEqual(s.connect.tokenCalls()[1].body, { subject: 'alice', provider: 'dev' }, 'a first round again');
  });

  for (const [name, capabilities] of [['no elicitation', {}], ['form only', { elicitation: { form: {} } }]]) {
    test(`${name}: a normal result naming the setup link, never a form`, async () => {
      const s = await mcpServer();
      const { client, prompts } = await modernClient(s.fetch, { capabilities, answer: async () => 'accept' });
      const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
      const link = `http://connect.test/connect/dev?e=${uuid(1)}`;
      assert.equal(text(r), `Not connected to dev. This client cannot open a connect page by itself: open ${link} in your browser to connect the account, then ask again.`);
      assert.deepEqual(r.structuredContent, { connected: false, provider: 'dev', setup_url: link });
      assert.ok(!r.isError);
      assert.equal(prompts.length, 0);
    });
  }

  test('no authenticated subject: an error, and mcp-connect is not asked', async () => {
    const s = await mcpServer();
    const { client } = await modernClient(s.fetch, { sub: '', answer: async () => 'accept' });
    const err = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } }).catch((e) => e);
    assert.match(String(err.message), /no authenticated subject/);
    assert.equal(s.connect.tokenCalls().length, 0);
  });

  test('mcp-connect refusals are tool errors naming the code; unknown providers are refused first', async () => {
    const s = await mcpServer();
    const { client } = await modernClient(s.fetch, { answer: async () => 'accept' });
    const unknown = await client.callTool({ name: 'whoami_on', arguments: { provider: 'nope' } });
    assert.equal(text(unknown), 'This server does not know the provider "nope".');
    assert.equal(unknown.isError, true);
    s.connect.state.refuse = 'provider_not_allowed';
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), 'The connection service could not answer (provider_not_allowed); try again later.');
    assert.equal(r.isError, true);
    assert.ok(!text(r).includes('mcpc_test_key'));
  });
});

/** A state another server sealed for the same call: the right format, another key. */
function sealForeign() {
  const call = { subject: 'alice', tool: 'whoami_on', arguments: { provider: 'dev' } };
  return sealRequestState(RequestStateKey.generate(), call, { elicitationId: uuid(1), expiresAt: Math.floor(Date.now() / 1000) + 600 });
}

describe('@modelcontextprotocol/server 2.4, 2025-11-25 clients (SDK 1.32 client)', () => {
  test('-32042 with the elicitation, the completion notification on the session, then the token', async () => {
    const s = await mcpServer();
    const { client, completions } = await legacyClient(s.fetch);
    const err = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } }).catch((e) => e);
    assert.equal(err.code, -32042);
    const [e] = err.data.elicitations;
    assert.deepEqual(e, { mode: 'url', message: 'Connect dev', url: `http://connect.test/connect/dev?e=${uuid(1)}`, elicitationId: uuid(1) });
    s.complete(uuid(1)); // the user connects in the browser
    await eventually(() => completions.length === 1);
    assert.deepEqual(completions, [uuid(1)]);
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), 'dev: tok-alice');
    const retry = s.connect.tokenCalls().at(-1).body;
    assert.equal(retry.elicitation_id, uuid(1), 'the session remembered the elicitation');
    // No wait on 2025-11-25: the notification tells the client, and a host asking again
    // later must not stall on a link the user left.
    assert.equal(retry.wait_seconds, undefined);
    assert.match(retry.mcp_session_id, /^[0-9a-f-]{36}$/);
  });

  test('without elicitation.url: the setup link', async () => {
    const s = await mcpServer();
    const { client } = await legacyClient(s.fetch, { capabilities: {} });
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(r.structuredContent.setup_url, `http://connect.test/connect/dev?e=${uuid(1)}`);
  });

  test('a session belongs to the subject that opened it', async () => {
    const s = await mcpServer();
    const { transport } = await legacyClient(s.fetch);
    const call = (sub) =>
      s.fetch('http://mcp.test/mcp', {
        method: 'POST',
        headers: { authorization: `Bearer as-${sub}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': transport.sessionId, 'mcp-protocol-version': '2025-11-25' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' }),
      });
    assert.equal((await call('bob')).status, 404);
    assert.equal((await call('alice')).status, 200);
  });
});

describe('2025-11-25 sessions are bounded', () => {
  test('past maxSessions a new session is refused while the others are in use', async () => {
    const s = await mcpServer({}, { maxSessions: 1 });
    await legacyClient(s.fetch);
    await assert.rejects(legacyClient(s.fetch, { sub: 'bob' }), /503|Too many sessions/);
  });

  test('an idle session makes room, and is gone afterwards', async () => {
    const s = await mcpServer({}, { maxSessions: 1, idleTimeoutMs: 0 });
    const first = await legacyClient(s.fetch);
    await legacyClient(s.fetch, { sub: 'bob' });
    await assert.rejects(first.client.listTools(), /404|Session not found/);
  });
});

describe('@modelcontextprotocol/sdk 1.32 adapter', () => {
  async function server132() {
    const connect = await fakeConnect();
    const gate = new McpConnect132({ client: new ConnectClient({ baseUrl: connect.url, apiKey: 'mcpc_test_key' }), stateKey, logger: { warn() {} } });
    const sessions = new Map();
    const fetch = async (url, init) => {
      const request = new Request(url, init);
      const authInfo = authOf(init?.headers);
      const id = request.headers.get('mcp-session-id');
      if (id) return sessions.get(id).handleRequest(request, { authInfo });
      const server = new McpServer132({ name: 'test', version: '1' });
      gate.registerTool(server, 'whoami_on', { inputSchema: inputSchema132 }, { providerArg: 'provider' }, body);
      const transport = new Transport132({ sessionIdGenerator: () => crypto.randomUUID(), enableJsonResponse: true, onsessioninitialized: (sid) => sessions.set(sid, transport) });
      await server.connect(transport);
      after(() => server.close());
      return transport.handleRequest(request, { authInfo });
    };
    return { connect, fetch, complete: connect.complete };
  }
  const inputSchema132 = { provider: z.string() };

  test('-32042, the completion notification, then the token', async () => {
    const s = await server132();
    const { client, completions } = await legacyClient(s.fetch);
    const err = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } }).catch((e) => e);
    assert.equal(err.code, -32042);
    assert.equal(err.data.elicitations[0].elicitationId, uuid(1));
    s.complete(uuid(1));
    await eventually(() => completions.length === 1);
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), 'dev: tok-alice');
    assert.equal(s.connect.tokenCalls().at(-1).body.elicitation_id, uuid(1));
  });

  test('without elicitation.url: the setup link', async () => {
    const s = await server132();
    const { client } = await legacyClient(s.fetch, { capabilities: {} });
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(r.structuredContent.setup_url, `http://connect.test/connect/dev?e=${uuid(1)}`);
  });
});
