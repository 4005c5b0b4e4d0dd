// The adapters with real SDK objects end to end: the official clients (2.4 for 2026-07-28,
// 1.32 for 2025-11-25) talk to the official servers (McpServer 2.4 behind
// createConnectHandler, McpServer 1.32) over their Streamable HTTP transports (the
// clients' fetch goes to the handler in-process), and the adapters ask a real HTTP peer on
// 127.0.0.1:0 that answers as mcp-connect does. The decision table first.

import assert from 'node:assert/strict';
import { type IncomingHttpHeaders, createServer } from 'node:http';
import { after, describe, test } from 'node:test';
import { Client, type ClientCapabilities, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { McpServer, type StandardSchemaWithJSON, fromJsonSchema } from '@modelcontextprotocol/server';
import { Client as LegacyClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as LegacyTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpServer as McpServer132 } from '@modelcontextprotocol/sdk/server/mcp.js';
import { WebStandardStreamableHTTPServerTransport as Transport132 } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { CallToolResultSchema, ElicitationCompleteNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { type AccessToken, ConnectClient, RequestStateKey, SubjectToken, type UrlElicitation, openRequestState, sealRequestState, urlElicitation } from '@mcp-connect/client';
import { type ConnectHandlerOptions, type Connection, McpConnect, type McpConnectOptions, createConnectHandler } from '@mcp-connect/client/server';
import { McpConnect as McpConnect132 } from '@mcp-connect/client/sdk';
// The 2025-11-25 session memory (not exported): from the module itself.
import { PendingElicitations } from '../dist/pending.js';
import { listen, settled } from './helpers.js';

/** What a JSON-RPC error thrown by the SDK clients carries, as far as these tests read it. */
interface RpcError extends Error {
  code: unknown;
  data: { elicitations: Array<Record<string, unknown>> };
}
const rpcError = (e: unknown) => e as RpcError;

/** A tools/call answer as the 2.4 client hands it out with `allowInputRequired`. */
interface Answered {
  content: Array<{ type: string; text?: string }>;
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
  resultType?: string;
  requestState?: string;
  inputRequests?: Record<string, { params: { url: string } }>;
}
const answered = (r: unknown) => r as Answered;

type Answer = 'accept' | 'decline' | 'cancel';

test('the decision table: revision x capabilities', () => {
  const url = { elicitation: { form: {}, url: {} } };
  const rows: Array<[string | undefined, unknown, UrlElicitation]> = [
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

const uuid = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

interface Elicitation {
  id: string;
  status: string;
  subject: string;
  provider: string;
  cancel_reason?: string | null;
}
/** The providers' display names, as mcp-connect names them (`prod` has none configured here). */
const PROVIDER_NAMES: Record<string, string> = { dev: 'Dev Provider' };

/** A request body the peer got (the /v1/token fields, or a cancel's `reason`). */
interface Body {
  subject: string;
  provider: string;
  subject_token?: string;
  elicitation_id?: string;
  wait_seconds?: number;
  mcp_session_id?: string;
  server_name?: string;
  reason?: string;
}
interface Recorded {
  method: string | undefined;
  path: string;
  query: string;
  body: Body | undefined;
  auth: string | undefined;
  headers: IncomingHttpHeaders;
}

async function fakeConnect() {
  const state = {
    elicitations: new Map<string, Elicitation>(),
    connected: new Set<string>(),
    calls: [] as Recorded[],
    refuse: undefined as string | undefined,
    /** Answer as an mcp-connect from before the display names (no provider_name, no provider on a cancel). */
    old: false,
    /** Refuse the cancel calls (500). */
    failCancel: false,
    /** `none`: the tenant hands out no credential (connected answers carry no access_token). */
    handOut: undefined as 'none' | undefined,
    /** Connections (`subject/provider`) /v1/token still finds but the proxy no longer does. */
    lostAtProxy: new Set<string>(),
    n: 0,
  };
  /** `provider_name` of the answers naming `provider`, as this peer's version sends it. */
  const named = (provider: string) => (state.old || PROVIDER_NAMES[provider] === undefined ? {} : { provider_name: PROVIDER_NAMES[provider] });
  const server = createServer((req, res) => {
    let text = '';
    req.on('data', (c: Buffer) => (text += c.toString()));
    req.on('end', () => {
      void (async (): Promise<void> => {
        const url = new URL(req.url ?? '/', 'http://x');
        const proxied = /^\/v1\/proxy\/([^/]+)(\/.*)$/.exec(url.pathname);
        const body = text && !proxied ? (JSON.parse(text) as Body) : undefined;
        state.calls.push({ method: req.method, path: url.pathname, query: url.search, body, auth: req.headers.authorization, headers: req.headers });
        const send = (status: number, v: unknown, headers: Record<string, string> = {}) => {
          res.writeHead(status, { 'content-type': 'application/json', ...headers });
          res.end(JSON.stringify(v));
        };
        /** /v1/token's connect_required answer: the pending elicitation named, or a new one. */
        const connectRequired = (subject: string, provider: string, asked: Elicitation | undefined, serverName: string | undefined) => {
          const el = asked && asked.status === 'pending' ? asked : { id: uuid(++state.n), status: 'pending', subject, provider };
          state.elicitations.set(el.id, el);
          const link = `http://connect.test/connect/${provider}?e=${el.id}`;
          const expires = new Date(Date.now() + 900_000).toISOString();
          // As mcp-connect: the message names the MCP server the request names.
          const message = serverName === undefined ? `Connect ${provider}` : `${serverName} needs access to your ${PROVIDER_NAMES[provider] ?? provider} account.`;
          return {
            status: 'connect_required',
            elicitation: { id: el.id, url: link, expires_at: expires },
            mcp: { mode: 'url', message, url: link, elicitationId: el.id },
            ...named(provider),
          };
        };
        if (proxied) {
          // As /v1/proxy: the provider's answer (here: what it got, as whom), or the proxy's
          // own connect_required (428, MCP-Connect-Error) where there is no usable connection.
          const header = (name: string) => {
            const v = req.headers[name];
            return typeof v === 'string' ? decodeURIComponent(v) : undefined;
          };
          const [, provider = '', path = ''] = proxied;
          const subject = header('mcp-connect-subject') ?? '';
          const key = `${subject}/${provider}`;
          if (req.headers.authorization !== 'Bearer mcpc_test_key') {
            send(401, { error: 'invalid_api_key', error_description: 'unknown key' });
            return;
          }
          if (state.connected.has(key) && !state.lostAtProxy.has(key)) {
            send(200, { provider, path: `${path}${url.search}`, subject });
            return;
          }
          const id = header('mcp-connect-elicitation-id');
          const answer = connectRequired(subject, provider, id === undefined ? undefined : state.elicitations.get(id), header('mcp-connect-server-name'));
          send(428, { error: 'connect_required', error_description: 'no usable connection', ...answer }, { 'mcp-connect-error': 'connect_required' });
          return;
        }
        if (state.refuse) {
          send(403, { error: state.refuse, error_description: 'refused' });
          return;
        }
        const m = /^\/v1\/elicitations\/([^/]+)(\/cancel)?$/.exec(url.pathname);
        if (url.pathname === '/v1/token' && body !== undefined) {
          const key = `${body.subject}/${body.provider}`;
          const e = body.elicitation_id === undefined ? undefined : state.elicitations.get(body.elicitation_id);
          if (state.connected.has(key) || e?.status === 'completed') {
            const credential = state.handOut === 'none' ? { hand_out: 'none' } : { access_token: `tok-${body.subject}` };
            send(200, { status: 'connected', ...credential, token_type: 'bearer', expires_at: null, scopes: [], account: null, connection_id: uuid(999) });
            return;
          }
          if (e?.status === 'declined') {
            send(200, { status: 'declined', elicitation_id: e.id, ...named(e.provider) });
            return;
          }
          send(200, connectRequired(body.subject, body.provider, e, body.server_name));
          return;
        }
        const e = m && state.elicitations.get(decodeURIComponent(m[1] ?? ''));
        if (!e) {
          send(404, { error: 'elicitation_not_found', error_description: 'none' });
          return;
        }
        if (m[2]) {
          if (state.failCancel) {
            send(500, { error: 'internal_error', error_description: 'down' });
            return;
          }
          if (e.status === 'pending') Object.assign(e, { status: 'cancelled', cancel_reason: body?.reason ?? null });
          const whose = state.old ? {} : { provider: e.provider, ...named(e.provider) };
          send(200, { id: e.id, status: e.status, cancel_reason: e.cancel_reason ?? null, ...whose });
          return;
        }
        const until = Date.now() + Number(url.searchParams.get('wait_seconds') ?? 0) * 1000;
        let gone = false;
        res.on('close', () => (gone = true)); // the watcher stopped asking
        // `e.status` and `gone` change while this waits (the test, the close event).
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition
        while (e.status === 'pending' && Date.now() < until && !gone) await new Promise((r) => setTimeout(r, 20));
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition
        if (gone) return;
        const t = new Date().toISOString();
        send(200, { id: e.id, status: e.status, subject: e.subject, provider: e.provider, scopes: [], created_at: t, expires_at: t, completed_at: null });
      })();
    });
  });
  const url = await listen(server);
  after(() => {
    server.closeAllConnections(); // also the keep-alive ones that fall idle later
    server.close();
  });
  const tokenCalls = () => state.calls.filter((c) => c.path === '/v1/token');
  /** The `i`th /v1/token body (negative: from the end), which must exist. */
  const tokenBody = (i: number): Body => {
    const body = tokenCalls().at(i)?.body;
    assert.ok(body !== undefined, `no /v1/token call ${i}`);
    return body;
  };
  /** The body of the first cancel, which must exist. */
  const cancelBody = (): Body | undefined => {
    const cancel = state.calls.find((c) => c.path.endsWith('/cancel'));
    assert.ok(cancel, 'the link is closed at mcp-connect');
    return cancel.body;
  };
  const complete = (id: string) => {
    const e = state.elicitations.get(id);
    assert.ok(e, `no elicitation ${id}`);
    e.status = 'completed';
    state.connected.add(`${e.subject}/${e.provider}`);
    state.lostAtProxy.delete(`${e.subject}/${e.provider}`);
  };
  /** The requests that came to /v1/proxy. */
  const proxyCalls = () => state.calls.filter((c) => c.path.startsWith('/v1/proxy/'));
  return { url, state, tokenCalls, tokenBody, cancelBody, complete, proxyCalls };
}

// --- The MCP server under test ------------------------------------------------------------

const stateKey = RequestStateKey.generate();
const inputSchema = fromJsonSchema({ type: 'object', properties: { provider: { type: 'string' } }, required: ['provider'] });
/** The tool body, the same for both adapters. */
const body = (args: { provider: string }, conn: { token: AccessToken }) => ({
  content: [{ type: 'text' as const, text: `${args.provider}: ${conn.token.reveal()}` }],
  structuredContent: { connected: true },
});

/** A tool body calling the provider through mcp-connect's proxy (the same for both adapters). */
const proxyBody = async (_args: { provider: string }, conn: { fetch: (input: string) => Promise<Response> }) => {
  const r = await conn.fetch('/user?x=1');
  return { content: [{ type: 'text' as const, text: `${r.status} ${await r.text()}` }] };
};

/** Test-side stand-in for the bearer check: `Bearer as-<sub>` is that subject. */
function authOf(headers: HeadersInit | undefined) {
  const m = /^Bearer as-(.+)$/.exec(new Headers(headers).get('authorization') ?? '');
  return m ? { token: 'opaque', clientId: 'test', scopes: [], expiresAt: 4e9, extra: { sub: m[1] } } : undefined;
}

type Fetch = (url: string | URL, init?: RequestInit) => Promise<Response>;

interface ServerSetup {
  schema?: StandardSchemaWithJSON;
  knownProviders?: string[];
  factoryDelayMs?: number;
  /** The tool body (default `body`). */
  tool?: (args: { provider: string }, conn: Connection) => Promise<{ content: Array<{ type: 'text'; text: string }> }> | ReturnType<typeof body>;
}

async function mcpServer(extra: Partial<McpConnectOptions> = {}, handlerOptions: ConnectHandlerOptions = {}, { schema = inputSchema, knownProviders = ['dev'], factoryDelayMs = 0, tool = body }: ServerSetup = {}) {
  const connect = await fakeConnect();
  const gate = new McpConnect({ client: new ConnectClient({ baseUrl: connect.url, apiKey: 'mcpc_test_key' }), stateKey, logger: { warn() {} }, ...extra });
  const factory = async () => {
    if (factoryDelayMs > 0) await new Promise((r) => setTimeout(r, factoryDelayMs));
    const server = new McpServer({ name: 'test', version: '1' });
    gate.registerTool<{ provider: string }>(server, 'whoami_on', { inputSchema: schema }, { providerArg: 'provider', knownProviders }, tool);
    return server;
  };
  const handler = createConnectHandler(factory, handlerOptions);
  after(() => handler.close());
  const wire: Array<{ params?: { requestState?: string; inputResponses?: unknown } }> = [];
  /** The transports' fetch: straight into the handler, as the bearer check would hand it on. */
  const fetch: Fetch = async (url, init) => {
    const request = new Request(url, init);
    if (typeof init?.body === 'string') wire.push(JSON.parse(init.body) as (typeof wire)[number]);
    const authInfo = authOf(init?.headers);
    return handler.fetch(request, authInfo ? { authInfo } : {});
  };
  return { connect, fetch, wire, complete: connect.complete, gate };
}

interface ModernOptions {
  sub?: string;
  capabilities?: ClientCapabilities;
  answer: (params: { url?: string }) => Answer | Promise<Answer>;
}

async function modernClient(fetch: Fetch, { sub = 'alice', capabilities = { elicitation: { form: {}, url: {} } }, answer }: ModernOptions) {
  const client = new Client({ name: 't', version: '1' }, { capabilities, versionNegotiation: { mode: { pin: '2026-07-28' } } });
  const prompts: Array<Record<string, unknown> & { url?: string }> = [];
  if (capabilities.elicitation) {
    client.setRequestHandler('elicitation/create', async (request) => {
      const params = request.params as Record<string, unknown> & { url?: string };
      prompts.push(params);
      return { action: await answer(params) };
    });
  }
  await client.connect(new StreamableHTTPClientTransport(new URL('http://mcp.test/mcp'), { fetch, requestInit: { headers: { authorization: `Bearer as-${sub}` } } }));
  after(() => client.close());
  return { client, prompts };
}

async function legacyClient(fetch: Fetch, { sub = 'alice', capabilities = { elicitation: { form: {}, url: {} } } }: { sub?: string; capabilities?: object } = {}) {
  const client = new LegacyClient({ name: 't', version: '1' }, { capabilities });
  const completions: string[] = [];
  client.setNotificationHandler(ElicitationCompleteNotificationSchema, (n) => void completions.push(n.params.elicitationId));
  const transport = new LegacyTransport(new URL('http://mcp.test/mcp'), { fetch, requestInit: { headers: { authorization: `Bearer as-${sub}` } } });
  await client.connect(transport);
  after(() => client.close());
  return { client, completions, transport };
}

/**
 * A tools/call of the 2.4 client that may answer input_required. A hand-made retry sends
 * `requestState` and `inputResponses`, which the typed params do not list.
 */
const callTool = (client: Client, params: { name: string; arguments: Record<string, unknown>; requestState?: unknown; inputResponses?: unknown }) =>
  client.callTool(params as Parameters<Client['callTool']>[0], { allowInputRequired: true }).then(answered);

const text = (r: unknown) => answered(r).content.map((c) => c.text).join('');
const eventually = async (f: () => boolean, ms = 5000) => {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 20))) if (f()) return;
  assert.fail('timed out');
};
/** `v`, which must be there. */
function must<T>(v: T | undefined): T {
  assert.ok(v !== undefined);
  return v;
}
/** The elicitation id in a connect link (`...?e=<id>`). */
const linkId = (url: string | undefined) => new URL(url ?? '').searchParams.get('e') ?? '';

describe('@modelcontextprotocol/server 2.4, 2026-07-28 clients', () => {
  test('accept, then connected: our mcs2 state is what travels, and the retry waits on the elicitation', async () => {
    const s = await mcpServer();
    const { client, prompts } = await modernClient(s.fetch, {
      answer: (params) => {
        s.complete(linkId(params.url)); // the user connects in the browser
        return 'accept';
      },
    });
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), 'dev: tok-alice');
    assert.equal(prompts.length, 1);
    assert.deepEqual(Object.keys(prompts[0] ?? {}).filter((k) => k !== '_meta').sort(), ['message', 'mode', 'url']); // no elicitationId in 2026-07-28
    const [first, retry] = [s.connect.tokenBody(0), s.connect.tokenBody(1)];
    // The validated access token goes along as the proof of the subject.
    assert.deepEqual(first, { subject: 'alice', subject_token: 'opaque', provider: 'dev' });
    const id = linkId(prompts[0]?.url);
    assert.deepEqual(retry, { subject: 'alice', subject_token: 'opaque', provider: 'dev', elicitation_id: id, wait_seconds: 20 });
    const sent = s.wire.find((m) => m.params?.requestState)?.params;
    assert.ok(sent?.requestState !== undefined);
    assert.match(sent.requestState, /^mcs2\.[A-Za-z0-9_-]{8}\.[A-Za-z0-9_-]+$/);
    assert.equal(openRequestState(sent.requestState, stateKey, { subject: 'alice', tool: 'whoami_on', arguments: { provider: 'dev' } }).elicitationId, id);
    assert.deepEqual(sent.inputResponses, { connect: { action: 'accept' } });
  });

  for (const action of ['decline', 'cancel'] as const) {
    test(`${action} closes the link at mcp-connect and ends in "not connected", no new prompt`, async () => {
      const s = await mcpServer();
      const { client, prompts } = await modernClient(s.fetch, { answer: () => action });
      const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
      // The display name from the cancel's answer; the structured content keeps the id.
      assert.equal(text(r), 'Not connected to Dev Provider: nothing was shared.');
      assert.deepEqual(r.structuredContent, { connected: false, provider: 'dev', setup_url: null });
      assert.equal(prompts.length, 1);
      assert.deepEqual(s.connect.cancelBody(), { reason: action });
      assert.equal(s.connect.tokenCalls().length, 1, 'mcp-connect is not asked again');
    });
  }

  for (const action of ['decline', 'cancel'] as const) {
    test(`${action} after the state's deadline still closes the link at mcp-connect (the elicitation outlives the state)`, async () => {
      let now = Date.now() / 1000;
      const s = await mcpServer({ now: () => now });
      const { client, prompts } = await modernClient(s.fetch, {
        answer: () => {
          now += 601; // the user answers after the state's 10 minutes; the link is still good
          return action;
        },
      });
      const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
      assert.equal(text(r), 'Not connected to Dev Provider: nothing was shared.');
      assert.equal(prompts.length, 1);
      const cancel = s.connect.state.calls.find((c) => c.path.endsWith('/cancel'));
      assert.ok(cancel, 'the link of the expired state is closed at mcp-connect');
      assert.equal(cancel.path, `/v1/elicitations/${uuid(1)}/cancel`);
      assert.deepEqual(cancel.body, { reason: action });
      assert.equal(s.connect.state.elicitations.get(uuid(1))?.status, 'cancelled');
      assert.equal(s.connect.tokenCalls().length, 1, 'no new round');
    });
  }

  test('an expired state from another user or key still refuses, even with decline', async () => {
    let now = Date.now() / 1000;
    const s = await mcpServer({ now: () => now });
    const { client } = await modernClient(s.fetch, { answer: () => 'accept' });
    const first = await callTool(client, { name: 'whoami_on', arguments: { provider: 'dev' } });
    now += 601;
    const bob = await modernClient(s.fetch, { sub: 'bob', answer: () => 'accept' });
    const err = rpcError(await settled(callTool(bob.client, { name: 'whoami_on', arguments: { provider: 'dev' }, requestState: first.requestState, inputResponses: { connect: { action: 'decline' } } })));
    assert.equal(err.code, -32602);
    assert.ok(!s.connect.state.calls.some((c) => c.path.endsWith('/cancel')), "bob cannot close alice's link");
  });

  test('the validated arguments name another provider than the token was asked for: refused, nothing asked', async () => {
    // A schema that transforms the provider: the raw arguments say dev, the body would get prod.
    const schema = z.object({ provider: z.string().transform((p) => (p === 'dev' ? 'prod' : p)) });
    const s = await mcpServer({}, {}, { schema, knownProviders: ['dev', 'prod'] });
    const { client } = await modernClient(s.fetch, { answer: () => 'accept' });
    s.connect.state.connected.add('alice/dev'); // a dev token would be handed out at once
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(r.isError, true);
    assert.equal(text(r), 'The tool\'s input schema changed the provider argument ("dev" became "prod"): refused, so that no provider\'s token is handed to a call for another.');
    assert.equal(s.connect.tokenCalls().length, 0, 'no token was fetched');
  });

  test('a schema that transforms other arguments but not the provider still runs the body', async () => {
    const schema = z.object({ provider: z.string(), n: z.string().default('x').transform((v) => v.length) });
    const s = await mcpServer({}, {}, { schema });
    const { client } = await modernClient(s.fetch, { answer: () => 'accept' });
    s.connect.state.connected.add('alice/dev');
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), 'dev: tok-alice');
  });

  test('subjectTokenOf can leave the proof out, and the token never prints', async () => {
    const s = await mcpServer({ subjectTokenOf: () => undefined });
    const { client } = await modernClient(s.fetch, { answer: () => 'decline' });
    await callTool(client, { name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.deepEqual(s.connect.tokenBody(0), { subject: 'alice', provider: 'dev' });
    const token = new SubjectToken('opaque-secret');
    assert.ok(!JSON.stringify({ token }).includes('opaque-secret') && !String(token).includes('opaque-secret'));
  });

  test('a pending retry answers input_required again with a fresh state', async () => {
    const s = await mcpServer({ waitSeconds: 1 });
    const { client } = await modernClient(s.fetch, { answer: () => 'accept' });
    const first = await callTool(client, { name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(first.resultType, 'input_required');
    const again = await callTool(client, { name: 'whoami_on', arguments: { provider: 'dev' }, requestState: first.requestState, inputResponses: { connect: { action: 'accept' } } });
    assert.equal(again.resultType, 'input_required');
    assert.ok(again.inputRequests?.connect && first.inputRequests?.connect);
    assert.equal(again.inputRequests.connect.params.url, first.inputRequests.connect.params.url, 'the same elicitation');
    assert.equal(s.connect.tokenBody(1).wait_seconds, 1);
  });

  test('a tampered, foreign or misplaced requestState is -32602 naming requestState, and nothing is asked', async () => {
    const s = await mcpServer();
    const { client } = await modernClient(s.fetch, { answer: () => 'accept' });
    const first = await callTool(client, { name: 'whoami_on', arguments: { provider: 'dev' } });
    const st = first.requestState;
    assert.ok(st !== undefined);
    const flipped = st.slice(0, -2) + (st.at(-2) === 'A' ? 'B' : 'A') + st.slice(-1);
    const bob = await modernClient(s.fetch, { sub: 'bob', answer: () => 'accept' });
    const foreign = sealForeign();
    const cases: Array<[Client, string, Record<string, unknown>, string]> = [
      [client, flipped, { provider: 'dev' }, 'requestState does not belong to this call'],
      [bob.client, st, { provider: 'dev' }, 'requestState does not belong to this call'], // another user's state
      [client, foreign, { provider: 'dev' }, 'requestState does not belong to this call'], // another server's key
      [client, 'garbage', { provider: 'dev' }, 'requestState is malformed'],
    ];
    const before = s.connect.tokenCalls().length;
    for (const [c, requestState, args, message] of cases) {
      const err = rpcError(await settled(callTool(c, { name: 'whoami_on', arguments: args, requestState, inputResponses: { connect: { action: 'accept' } } })));
      assert.equal(err.code, -32602, String(err));
      assert.match(err.message, new RegExp(message));
    }
    assert.equal(s.connect.tokenCalls().length, before);
  });

  test('an expired state starts over instead of failing', async () => {
    let now = Date.now() / 1000;
    const s = await mcpServer({ now: () => now });
    const { client } = await modernClient(s.fetch, { answer: () => 'accept' });
    const first = await callTool(client, { name: 'whoami_on', arguments: { provider: 'dev' } });
    now += 601;
    const again = await callTool(client, { name: 'whoami_on', arguments: { provider: 'dev' }, requestState: first.requestState, inputResponses: { connect: { action: 'accept' } } });
    assert.equal(again.resultType, 'input_required');
    assert.deepEqual(s.connect.tokenBody(1), { subject: 'alice', subject_token: 'opaque', provider: 'dev' }, 'a first round again');
  });

  const noUrlMode: Array<[string, ClientCapabilities]> = [
    ['no elicitation', {}],
    ['form only', { elicitation: { form: {} } }],
  ];
  for (const [name, capabilities] of noUrlMode) {
    test(`${name}: a normal result naming the setup link, never a form`, async () => {
      const s = await mcpServer();
      const { client, prompts } = await modernClient(s.fetch, { capabilities, answer: () => 'accept' });
      const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
      const link = `http://connect.test/connect/dev?e=${uuid(1)}`;
      assert.equal(text(r), `Not connected to Dev Provider. This client cannot open a connect page by itself: open ${link} in your browser to connect the account, then ask again.`);
      assert.deepEqual(r.structuredContent, { connected: false, provider: 'dev', setup_url: link });
      assert.ok(!r.isError);
      assert.equal(prompts.length, 0);
    });
  }

  test('serverName goes on every token request, and the prompt names the MCP server', async () => {
    const s = await mcpServer({ serverName: 'Whoami Tools' });
    const { client, prompts } = await modernClient(s.fetch, {
      answer: (params) => {
        s.complete(linkId(params.url));
        return 'accept';
      },
    });
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), 'dev: tok-alice');
    assert.equal(prompts[0]?.message, 'Whoami Tools needs access to your Dev Provider account.');
    assert.deepEqual(
      s.connect.tokenCalls().map((c) => c.body?.server_name),
      ['Whoami Tools', 'Whoami Tools'],
      'the first round and the retry',
    );
  });

  test('an invalid serverName is left out (with a warning), and the tool call goes on', async () => {
    for (const serverName of ['', 'x'.repeat(65), 'Who\nami', 'Who\u202eami']) {
      const warnings: string[] = [];
      const s = await mcpServer({ serverName, logger: { warn: (m) => void warnings.push(m) } });
      const { client } = await modernClient(s.fetch, { answer: () => 'decline' });
      const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
      assert.equal(text(r), 'Not connected to Dev Provider: nothing was shared.', JSON.stringify(serverName));
      assert.deepEqual(s.connect.tokenBody(0), { subject: 'alice', subject_token: 'opaque', provider: 'dev' }, 'no server_name');
      assert.ok(
        warnings.some((w) => /serverName/.test(w)),
        JSON.stringify(warnings),
      );
    }
  });

  test('declined on mcp-connect\'s page: "not connected" names the provider\'s display name', async () => {
    const s = await mcpServer();
    const { client } = await modernClient(s.fetch, {
      answer: (params) => {
        must(s.connect.state.elicitations.get(linkId(params.url))).status = 'declined'; // the user declines on the page
        return 'accept';
      },
    });
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), 'Not connected to Dev Provider: nothing was shared.');
    assert.deepEqual(r.structuredContent, { connected: false, provider: 'dev', setup_url: null });
    assert.equal(s.connect.tokenBody(1).elicitation_id, uuid(1));
  });

  test('the cancel call fails: "not connected" names the provider id', async () => {
    const s = await mcpServer();
    s.connect.state.failCancel = true;
    const { client } = await modernClient(s.fetch, { answer: () => 'decline' });
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), 'Not connected to dev: nothing was shared.');
    assert.deepEqual(r.structuredContent, { connected: false, provider: 'dev', setup_url: null });
    assert.ok(s.connect.state.calls.some((c) => c.path.endsWith('/cancel')), 'the cancel was tried');
  });

  test('an mcp-connect that names no provider (older): the texts name the provider id', async () => {
    const s = await mcpServer();
    s.connect.state.old = true;
    const declining = await modernClient(s.fetch, { answer: () => 'decline' });
    const r = await declining.client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), 'Not connected to dev: nothing was shared.');
    const { client } = await modernClient(s.fetch, { capabilities: {}, answer: () => 'accept' });
    const link = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.match(text(link), /^Not connected to dev\. This client cannot open a connect page by itself/);
  });

  test('custom results get the display name as their last argument; ones without it still work', async () => {
    const seen: Array<[string, string | undefined]> = [];
    const s = await mcpServer({
      results: {
        notConnected: (provider) => ({ content: [{ type: 'text', text: `no ${provider}` }] }),
        setupLink: (provider, url, providerName) => {
          seen.push([provider, providerName]);
          return { content: [{ type: 'text', text: `${providerName ?? provider}: ${url}` }] };
        },
      },
    });
    const declining = await modernClient(s.fetch, { answer: () => 'decline' });
    assert.equal(text(await declining.client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } })), 'no dev');
    const { client } = await modernClient(s.fetch, { capabilities: {}, answer: () => 'accept' });
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), `Dev Provider: http://connect.test/connect/dev?e=${uuid(2)}`);
    assert.deepEqual(seen, [['dev', 'Dev Provider']]);
  });

  test('no authenticated subject: an error, and mcp-connect is not asked', async () => {
    const s = await mcpServer();
    const { client } = await modernClient(s.fetch, { sub: '', answer: () => 'accept' });
    const err = rpcError(await settled(client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } })));
    assert.match(err.message, /no authenticated subject/);
    assert.equal(s.connect.tokenCalls().length, 0);
  });

  test('mcp-connect refusals are tool errors naming the code; unknown providers are refused first', async () => {
    const s = await mcpServer();
    const { client } = await modernClient(s.fetch, { answer: () => 'accept' });
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
    const err = rpcError(await settled(client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } })));
    assert.equal(err.code, -32042);
    const [e] = err.data.elicitations;
    assert.deepEqual(e, { mode: 'url', message: 'Connect dev', url: `http://connect.test/connect/dev?e=${uuid(1)}`, elicitationId: uuid(1) });
    s.complete(uuid(1)); // the user connects in the browser
    await eventually(() => completions.length === 1);
    assert.deepEqual(completions, [uuid(1)]);
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), 'dev: tok-alice');
    const retry = s.connect.tokenBody(-1);
    assert.equal(retry.elicitation_id, uuid(1), 'the session remembered the elicitation');
    // No wait on 2025-11-25: the notification tells the client, and a host asking again
    // later must not stall on a link the user left.
    assert.equal(retry.wait_seconds, undefined);
    assert.match(retry.mcp_session_id ?? '', /^[0-9a-f-]{36}$/);
  });

  test('without elicitation.url: the setup link', async () => {
    const s = await mcpServer();
    const { client } = await legacyClient(s.fetch, { capabilities: {} });
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(answered(r).structuredContent?.setup_url, `http://connect.test/connect/dev?e=${uuid(1)}`);
  });

  test('decline answering the remembered elicitation: the link is closed, "not connected" names the display name', async () => {
    const s = await mcpServer();
    const { client } = await legacyClient(s.fetch);
    const err = rpcError(await settled(client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } })));
    assert.equal(err.code, -32042);
    // The retry carries the client's answer (no requestState on 2025-11-25): the session
    // memory names the elicitation it answers.
    const params = { name: 'whoami_on', arguments: { provider: 'dev' }, inputResponses: { connect: { action: 'decline' } } };
    const r = await client.request({ method: 'tools/call', params }, CallToolResultSchema);
    assert.equal(text(r), 'Not connected to Dev Provider: nothing was shared.');
    assert.deepEqual(r.structuredContent, { connected: false, provider: 'dev', setup_url: null });
    const cancel = s.connect.state.calls.find((c) => c.path.endsWith('/cancel'));
    assert.equal(cancel?.path, `/v1/elicitations/${uuid(1)}/cancel`);
    assert.deepEqual(cancel.body, { reason: 'decline' });
    assert.equal(s.connect.tokenCalls().length, 1, 'no new round');
  });

  test('declined on the page, then the retry: "not connected" names the display name', async () => {
    const s = await mcpServer({ serverName: 'Whoami Tools' });
    const { client } = await legacyClient(s.fetch);
    const err = rpcError(await settled(client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } })));
    assert.equal(err.data.elicitations[0]?.message, 'Whoami Tools needs access to your Dev Provider account.');
    must(s.connect.state.elicitations.get(uuid(1))).status = 'declined';
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), 'Not connected to Dev Provider: nothing was shared.');
    assert.deepEqual(
      s.connect.tokenCalls().map((c) => [c.body?.elicitation_id, c.body?.server_name]),
      [
        [undefined, 'Whoami Tools'],
        [uuid(1), 'Whoami Tools'],
      ],
    );
  });

  test('a session belongs to the subject that opened it', async () => {
    const s = await mcpServer();
    const { transport } = await legacyClient(s.fetch);
    const call = (sub: string) =>
      s.fetch('http://mcp.test/mcp', {
        method: 'POST',
        headers: { authorization: `Bearer as-${sub}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': String(transport.sessionId), 'mcp-protocol-version': '2025-11-25' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' }),
      });
    assert.equal((await call('bob')).status, 404);
    assert.equal((await call('alice')).status, 200);
  });
});

describe('through the proxy: conn.fetch, no hand-out, and a ConnectRequiredError the body throws', () => {
  test('the body calls the provider through conn.fetch, as this user, with the server key and the subject token', async () => {
    const s = await mcpServer({ serverName: 'Whoami Tools' }, {}, { tool: proxyBody });
    s.connect.state.connected.add('alice/dev');
    const { client } = await modernClient(s.fetch, { answer: () => 'accept' });
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), '200 {"provider":"dev","path":"/user?x=1","subject":"alice"}');
    const [proxied] = s.connect.proxyCalls();
    assert.ok(proxied);
    assert.equal(proxied.path, '/v1/proxy/dev/user');
    assert.equal(proxied.auth, 'Bearer mcpc_test_key');
    assert.equal(proxied.headers['mcp-connect-subject'], 'alice');
    assert.equal(proxied.headers['mcp-connect-subject-token'], 'opaque', 'the proof the gate forwards to /v1/token goes along');
    assert.equal(proxied.headers['mcp-connect-server-name'], 'Whoami%20Tools');
  });

  test('a tenant that hands out no credential: the body runs with conn.fetch; revealing conn.token is a clear error', async () => {
    const s = await mcpServer({}, {}, { tool: proxyBody });
    s.connect.state.handOut = 'none';
    s.connect.state.connected.add('alice/dev');
    const { client } = await modernClient(s.fetch, { answer: () => 'accept' });
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), '200 {"provider":"dev","path":"/user?x=1","subject":"alice"}');
    // A body written for a handed-out token.
    const t = await mcpServer();
    t.connect.state.handOut = 'none';
    t.connect.state.connected.add('alice/dev');
    const old = await modernClient(t.fetch, { answer: () => 'accept' });
    const refused = await old.client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(refused.isError, true);
    assert.match(text(refused), /mcp-connect handed out no credential for dev.*conn\.fetch/);
  });

  test('2026-07-28: input_required for the proxy\'s elicitation, sealed in our requestState; the retry runs the body', async () => {
    const s = await mcpServer({}, {}, { tool: proxyBody });
    s.connect.state.connected.add('alice/dev');
    s.connect.state.lostAtProxy.add('alice/dev'); // /v1/token hands out, the proxy finds no usable connection
    const { client, prompts } = await modernClient(s.fetch, {
      answer: (params) => {
        s.complete(linkId(params.url));
        return 'accept';
      },
    });
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), '200 {"provider":"dev","path":"/user?x=1","subject":"alice"}');
    assert.equal(prompts.length, 1);
    assert.equal(prompts[0]?.url, `http://connect.test/connect/dev?e=${uuid(1)}`);
    const sent = s.wire.find((m) => m.params?.requestState)?.params;
    assert.ok(sent?.requestState !== undefined);
    assert.match(sent.requestState, /^mcs2\.[A-Za-z0-9_-]{8}\.[A-Za-z0-9_-]+$/);
    assert.equal(openRequestState(sent.requestState, stateKey, { subject: 'alice', tool: 'whoami_on', arguments: { provider: 'dev' } }).elicitationId, uuid(1));
    assert.deepEqual(s.connect.tokenBody(-1), { subject: 'alice', subject_token: 'opaque', provider: 'dev', elicitation_id: uuid(1), wait_seconds: 20 });
    assert.equal(s.connect.proxyCalls().length, 2);
  });

  test('2026-07-28 without URL mode: the setup link of the proxy\'s elicitation', async () => {
    const s = await mcpServer({}, {}, { tool: proxyBody });
    s.connect.state.connected.add('alice/dev');
    s.connect.state.lostAtProxy.add('alice/dev');
    const { client } = await modernClient(s.fetch, { capabilities: {}, answer: () => 'accept' });
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(answered(r).structuredContent?.setup_url, `http://connect.test/connect/dev?e=${uuid(1)}`);
    assert.ok(!answered(r).isError);
  });

  test('2025-11-25: -32042 for the proxy\'s elicitation, the completion notification, then the body runs', async () => {
    const s = await mcpServer({}, {}, { tool: proxyBody });
    s.connect.state.connected.add('alice/dev');
    s.connect.state.lostAtProxy.add('alice/dev');
    const { client, completions } = await legacyClient(s.fetch);
    const err = rpcError(await settled(client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } })));
    assert.equal(err.code, -32042);
    assert.deepEqual(err.data.elicitations[0], { mode: 'url', message: 'Connect dev', url: `http://connect.test/connect/dev?e=${uuid(1)}`, elicitationId: uuid(1) });
    s.complete(uuid(1));
    await eventually(() => completions.length === 1);
    assert.deepEqual(completions, [uuid(1)]);
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), '200 {"provider":"dev","path":"/user?x=1","subject":"alice"}');
    assert.equal(s.connect.tokenBody(-1).elicitation_id, uuid(1), 'the session remembered the proxy\'s elicitation');
  });

  test('a library that wraps the error (its cause) still gets the elicitation', async () => {
    const wrapping = async (args: { provider: string }, conn: Connection) => {
      try {
        return await proxyBody(args, conn);
      } catch (e) {
        throw new Error('the API library failed', { cause: e });
      }
    };
    const s = await mcpServer({}, {}, { tool: wrapping });
    s.connect.state.connected.add('alice/dev');
    s.connect.state.lostAtProxy.add('alice/dev');
    const { client } = await modernClient(s.fetch, { answer: () => 'decline' });
    const first = await callTool(client, { name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(first.resultType, 'input_required');
  });

  test("a ConnectRequiredError of another proxy (another provider or user) is not this call's: a tool error, no prompt", async () => {
    const holder: { other?: (input: string) => Promise<Response> } = {};
    const s = await mcpServer({}, {}, { tool: (args) => proxyBody(args, { fetch: (input) => must(holder.other)(input) }) });
    holder.other = s.gate.client.proxyFetch({ provider: 'prod', subject: 'bob' });
    s.connect.state.connected.add('alice/dev');
    const { client, prompts } = await modernClient(s.fetch, { answer: () => 'accept' });
    const r = await callTool(client, { name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(r.isError, true);
    assert.equal(r.resultType, undefined);
    assert.equal(prompts.length, 0, "bob's link is never shown to alice");
    assert.ok(!text(r).includes('connect.test'), text(r));
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

const initialize = (fetch: Fetch, sub: string) =>
  fetch('http://mcp.test/mcp', {
    method: 'POST',
    headers: { authorization: `Bearer as-${sub}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 't', version: '1' } } }),
  });

describe('2025-11-25 sessions are bounded per owner', () => {
  test('past maxSessionsPerOwner, the owner\'s least recently used session is closed', async () => {
    const s = await mcpServer({}, { maxSessionsPerOwner: 2 });
    const a1 = await legacyClient(s.fetch);
    const a2 = await legacyClient(s.fetch);
    const bob = await legacyClient(s.fetch, { sub: 'bob' });
    await a1.client.listTools(); // a2 is now alice's least recently used
    const a3 = await legacyClient(s.fetch);
    await assert.rejects(a2.client.listTools(), /404|Session not found/);
    await a1.client.listTools();
    await a3.client.listTools();
    await bob.client.listTools();
  });

  test('one subject cannot fill the table: another still gets a session', async () => {
    const s = await mcpServer({}, { maxSessions: 3, maxSessionsPerOwner: 2 });
    for (let i = 0; i < 5; i++) await legacyClient(s.fetch); // alice keeps opening sessions
    const bob = await legacyClient(s.fetch, { sub: 'bob' });
    await bob.client.listTools();
  });

  test('the default is 16 sessions per owner', async () => {
    const s = await mcpServer();
    const alice: Array<Awaited<ReturnType<typeof legacyClient>>> = [];
    for (let i = 0; i < 17; i++) alice.push(await legacyClient(s.fetch));
    await assert.rejects(alice[0]?.client.listTools() ?? Promise.resolve(), /404|Session not found/);
    for (const a of alice.slice(1)) await a.client.listTools();
  });

  test('concurrent initializes cannot go past maxSessions: the slot is taken before the server is made', async () => {
    const s = await mcpServer({}, { maxSessions: 2 }, { factoryDelayMs: 100 });
    const statuses = (await Promise.all(['a', 'b', 'c', 'd', 'e'].map((sub) => initialize(s.fetch, sub)))).map((r) => r.status);
    assert.deepEqual(statuses.filter((x) => x === 200).length, 2, String(statuses));
    assert.deepEqual(statuses.filter((x) => x === 503).length, 3, String(statuses));
  });

  test('concurrent initializes of one owner cannot go past maxSessionsPerOwner', async () => {
    const s = await mcpServer({}, { maxSessionsPerOwner: 2 }, { factoryDelayMs: 100 });
    const answers = await Promise.all([1, 2, 3, 4].map(() => initialize(s.fetch, 'alice')));
    const ok = answers.filter((r) => r.status === 200);
    assert.equal(ok.length, 2, String(answers.map((r) => r.status)));
    for (const r of answers.filter((r) => r.status !== 200)) {
      assert.equal(r.status, 503);
      assert.equal(((await r.json()) as { error: { message: string } }).error.message, 'Too many sessions');
    }
    // Once open, a new one replaces alice's least recently used instead.
    assert.equal((await initialize(s.fetch, 'alice')).status, 200);
  });
});

describe('the 2025-11-25 session memory is bounded per subject', () => {
  test('past 32 entries of one subject, its oldest goes; another subject\'s stay', () => {
    const pending = new PendingElicitations();
    const key = (sub: string, n: number) => must(PendingElicitations.key('s1', sub, 'whoami_on', { provider: 'dev', n }));
    pending.remember(key('bob', 0), uuid(100), 2e9, 1e9, 'bob');
    for (let n = 1; n <= 33; n++) pending.remember(key('alice', n), uuid(n), 2e9, 1e9, 'alice');
    assert.equal(pending.size, 33, "alice's 32 and bob's 1");
    assert.equal(pending.take(key('alice', 1), 1e9), undefined, "alice's oldest went");
    assert.equal(pending.take(key('alice', 2), 1e9), uuid(2));
    assert.equal(pending.take(key('alice', 33), 1e9), uuid(33));
    assert.equal(pending.take(key('bob', 0), 1e9), uuid(100), "bob's is untouched");
  });

  test('one subject cannot fill the whole memory; remembering a key again refreshes it', () => {
    const pending = new PendingElicitations({ capacity: 4, perSubject: 2 });
    const key = (sub: string, n: number) => must(PendingElicitations.key(undefined, sub, 't', { n }));
    for (let n = 1; n <= 10; n++) pending.remember(key('alice', n), uuid(n), 2e9, 1e9, 'alice');
    pending.remember(key('bob', 1), uuid(101), 2e9, 1e9, 'bob');
    pending.remember(key('carol', 1), uuid(201), 2e9, 1e9, 'carol');
    assert.equal(pending.size, 4);
    pending.remember(key('alice', 9), uuid(9), 2e9, 1e9, 'alice'); // 9 is now alice's newest
    pending.remember(key('alice', 11), uuid(11), 2e9, 1e9, 'alice'); // 10 goes, not 9
    assert.equal(pending.take(key('alice', 10), 1e9), undefined);
    assert.equal(pending.take(key('alice', 9), 1e9), uuid(9));
    assert.equal(pending.take(key('bob', 1), 1e9), uuid(101));
    assert.equal(pending.take(key('carol', 1), 1e9), uuid(201));
  });

  test('through the adapter: a user varying the arguments pushes out only their own entries', async () => {
    const s = await mcpServer();
    const bob = await legacyClient(s.fetch, { sub: 'bob' });
    const bobErr = rpcError(await settled(bob.client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } })));
    assert.equal(bobErr.code, -32042);
    const alice = await legacyClient(s.fetch);
    for (let n = 0; n < 33; n++) {
      const err = rpcError(await settled(alice.client.callTool({ name: 'whoami_on', arguments: { provider: 'dev', n } })));
      assert.equal(err.code, -32042);
    }
    assert.equal(s.gate.legacy.size, 33, "alice's 32 and bob's 1");
    await settled(alice.client.callTool({ name: 'whoami_on', arguments: { provider: 'dev', n: 1 } }));
    assert.equal(s.connect.tokenBody(-1).elicitation_id, uuid(3), 'the second is remembered');
    await settled(alice.client.callTool({ name: 'whoami_on', arguments: { provider: 'dev', n: 0 } }));
    assert.equal(s.connect.tokenBody(-1).elicitation_id, undefined, "alice's oldest was forgotten: a new round");
    await settled(bob.client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } }));
    assert.equal(s.connect.tokenBody(-1).elicitation_id, uuid(1), "bob's entry survived");
  });
});

describe('@modelcontextprotocol/sdk 1.32 adapter', () => {
  async function server132(extra: Partial<McpConnectOptions> = {}, handler: typeof proxyBody | typeof body = body) {
    const connect = await fakeConnect();
    const gate = new McpConnect132({ client: new ConnectClient({ baseUrl: connect.url, apiKey: 'mcpc_test_key' }), stateKey, logger: { warn() {} }, ...extra });
    const sessions = new Map<string, Transport132>();
    const fetch: Fetch = async (url, init) => {
      const request = new Request(url, init);
      const authInfo = authOf(init?.headers);
      const id = request.headers.get('mcp-session-id');
      if (id) return must(sessions.get(id)).handleRequest(request, { authInfo });
      const server = new McpServer132({ name: 'test', version: '1' });
      gate.registerTool<{ provider: string }>(server, 'whoami_on', { inputSchema: inputSchema132 }, { providerArg: 'provider' }, handler);
      const transport: Transport132 = new Transport132({
        sessionIdGenerator: () => crypto.randomUUID(),
        enableJsonResponse: true,
        onsessioninitialized: (sid) => void sessions.set(sid, transport),
      });
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
    const err = rpcError(await settled(client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } })));
    assert.equal(err.code, -32042);
    assert.equal(err.data.elicitations[0]?.elicitationId, uuid(1));
    s.complete(uuid(1));
    await eventually(() => completions.length === 1);
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), 'dev: tok-alice');
    assert.equal(s.connect.tokenBody(-1).elicitation_id, uuid(1));
  });

  test('without elicitation.url: the setup link', async () => {
    const s = await server132();
    const { client } = await legacyClient(s.fetch, { capabilities: {} });
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(answered(r).structuredContent?.setup_url, `http://connect.test/connect/dev?e=${uuid(1)}`);
  });

  test('a ConnectRequiredError thrown by the body through conn.fetch: -32042 with its elicitation, then the body runs', async () => {
    const s = await server132({}, proxyBody);
    s.connect.state.connected.add('alice/dev');
    s.connect.state.lostAtProxy.add('alice/dev'); // /v1/token hands out, the proxy finds no usable connection
    const { client, completions } = await legacyClient(s.fetch);
    const err = rpcError(await settled(client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } })));
    assert.equal(err.code, -32042);
    assert.deepEqual(err.data.elicitations[0], { mode: 'url', message: 'Connect dev', url: `http://connect.test/connect/dev?e=${uuid(1)}`, elicitationId: uuid(1) });
    s.complete(uuid(1));
    await eventually(() => completions.length === 1);
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.equal(text(r), '200 {"provider":"dev","path":"/user?x=1","subject":"alice"}');
    assert.equal(s.connect.tokenBody(-1).elicitation_id, uuid(1), 'the proxy\'s elicitation was remembered for the session');
  });

  test('serverName goes on the token request; the setup link text names the display name', async () => {
    const s = await server132({ serverName: 'Whoami Tools' });
    const { client } = await legacyClient(s.fetch, { capabilities: {} });
    const r = await client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
    assert.match(text(r), /^Not connected to Dev Provider\. This client cannot open a connect page by itself/);
    assert.equal(answered(r).structuredContent?.provider, 'dev');
    assert.equal(s.connect.tokenBody(0).server_name, 'Whoami Tools');
  });
});
