// The adapter for `@modelcontextprotocol/server` 2.4, which serves 2026-07-28 (per-request,
// `input_required`) and 2025-11-25 (sessions, `-32042`) from one McpServer factory.
//
//   const connect = new McpConnect({ client, stateKey });
//   const factory = () => {
//     const server = new McpServer({ name: 'whoami', version: '1.0.0' });
//     connect.registerTool(server, 'whoami_on', { inputSchema }, { providerArg: 'provider' },
//       async (args, conn) => ({ content: [{ type: 'text', text: await (await conn.fetch('/user')).text() }] }));
//     return server;
//   };
//   const handler = createConnectHandler(factory); // handler.fetch(request, { authInfo })

import { randomUUID } from 'node:crypto';
import {
  CLIENT_CAPABILITIES_META_KEY,
  type AuthInfo,
  type CallToolResult,
  type McpServer,
  type McpServerFactory,
  PROTOCOL_VERSION_META_KEY,
  ProtocolError,
  ProtocolErrorCode,
  type ServerContext,
  UrlElicitationRequiredError,
  WebStandardStreamableHTTPServerTransport,
  createMcpHandler,
  inputRequired,
  isInitializeRequest,
  isLegacyRequest,
} from '@modelcontextprotocol/server';
import {
  type Access,
  type Call,
  ConnectGate,
  type ConnectedToolOptions,
  type Connection,
  INPUT_KEY,
  type Resumed,
  type ToolResult,
  defaultSubjectOf,
  isKnownProvider,
  providerOf,
  urlElicitation,
} from './gate.js';
import { RequestStateError } from './requestState.js';

// The option and callback types McpConnect's signatures name (the same in both adapters).
export type { AuthInfoLike, ConnectedToolOptions, Connection, Logger, McpConnectOptions, Results, ToolResult } from './gate.js';
// The bearer check of the MCP callers (the IdP's JWT access tokens), for this SDK.
export { JwtVerifier, bearerAuth } from './bearer.js';
export type { BearerAuth, BearerAuthOptions, JwtVerifierOptions } from './bearer.js';

export type ConnectedToolHandler<Args> = (args: Args, conn: Connection, ctx: ServerContext) => CallToolResult | Promise<CallToolResult>;

/** The config argument of each of a pair of overloads (inferred from the last two). */
type ConfigOfOverloads<F> = F extends {
  (name: string, config: infer A, ...rest: never[]): unknown;
  // Two signatures on purpose: inference reads one overload per signature.
  // eslint-disable-next-line @typescript-eslint/unified-signatures
  (name: string, config: infer B, ...rest: never[]): unknown;
}
  ? A | B
  : never;

/**
 * The second argument of McpServer.registerTool (title, description, inputSchema, ...).
 * It has two overloads: a Standard Schema (`z.object(...)`, `fromJsonSchema(...)`) and the
 * deprecated raw zod shape; `Parameters<>` would see the last one only, refusing the first.
 */
export type ToolConfig = ConfigOfOverloads<McpServer['registerTool']>;

/** One tools/call of a connected tool, prepared before McpServer runs the tool. */
type Prepared = { call: Call; resumed: Resumed } | { result: ToolResult };

interface ServerEntry {
  tools: Map<string, { gate: McpConnect; options: ConnectedToolOptions }>;
  /** 2025-11-25 completion watchers of this server's session, by elicitation id. */
  watchers: Map<string, AbortController>;
}

const SERVERS = new WeakMap<McpServer, ServerEntry>();
/** Keyed by the handler context, which McpServer hands on unchanged to the tool callback. */
const PREPARED = new WeakMap<object, Prepared>();

function revisionOf(server: McpServer, ctx: ServerContext): string | undefined {
  const v = (ctx.mcpReq.envelope as Record<string, unknown> | undefined)?.[PROTOCOL_VERSION_META_KEY];
  // Deprecated for 2026-07-28 requests, which the envelope answers above; for 2025-era
  // sessions it is the initialize-negotiated revision, which is what is wanted here.
  // eslint-disable-next-line @typescript-eslint/no-deprecated
  return typeof v === 'string' ? v : server.server.getNegotiatedProtocolVersion();
}

/** 2026-07-28: the request's own capabilities; 2025-11-25: those declared at initialize. */
function capabilitiesOf(server: McpServer, ctx: ServerContext): unknown {
  const envelope = ctx.mcpReq.envelope as Record<string, unknown> | undefined;
  // As above: only 2025-era sessions get here, for which this is the initialize-scoped value.
  // eslint-disable-next-line @typescript-eslint/no-deprecated
  return envelope !== undefined ? envelope[CLIENT_CAPABILITIES_META_KEY] : server.server.getClientCapabilities();
}

/**
 * Runs before McpServer's own tools/call handler, where a JSON-RPC error can still be
 * answered: McpServer turns whatever a tool callback throws into an `isError` result (all
 * but -32042), and a refused requestState must be a -32602 error. The SDK's own hook for
 * this, ServerOptions.requestState.verify, sees neither the tool nor its arguments, which
 * the mcs2 state is bound to. So the adapter wraps the one tools/call handler McpServer
 * installs, on this server instance only, and hands the prepared call to the tool callback.
 */
function prepare(server: McpServer, entry: ServerEntry, request: { params: { name: string; arguments?: unknown } }, ctx: ServerContext): void {
  const tool = entry.tools.get(request.params.name);
  if (tool === undefined) return;
  const { gate, options } = tool;
  const subject = gate.subjectOf(ctx.http?.authInfo);
  if (subject === undefined) throw new ProtocolError(ProtocolErrorCode.InternalError, 'no authenticated subject on the request');
  const args = request.params.arguments ?? {};
  const provider = providerOf(options, args);
  if (provider === undefined) throw new ProtocolError(ProtocolErrorCode.InvalidParams, `${options.providerArg ?? 'the provider'} is required`);
  if (!isKnownProvider(options, provider)) {
    PREPARED.set(ctx, { result: gate.results.unknownProvider(provider) });
    return;
  }
  const response = ctx.mcpReq.inputResponses?.[INPUT_KEY] as { action?: unknown } | undefined;
  const call: Call = {
    subject,
    subjectToken: gate.subjectTokenOf(ctx.http?.authInfo),
    provider,
    tool: request.params.name,
    arguments: args,
    answer: typeof response?.action === 'string' ? response.action : undefined,
    mode: urlElicitation(revisionOf(server, ctx), capabilitiesOf(server, ctx)),
    sessionId: ctx.sessionId,
    scopes: options.scopes,
  };
  try {
    PREPARED.set(ctx, { call, resumed: gate.resume(call, ctx.mcpReq.requestState()) });
  } catch (e) {
    if (e instanceof RequestStateError) throw new ProtocolError(ProtocolErrorCode.InvalidParams, e.message);
    throw e;
  }
}

function entryOf(server: McpServer): ServerEntry {
  const known = SERVERS.get(server);
  if (known !== undefined) return known;
  const low = server.server;
  try {
    low.assertCanSetRequestHandler('tools/call');
  } catch {
    throw new Error('mcp-connect: register connected tools before this server\'s other tools (its tools/call handler must be wrapped as it is installed)');
  }
  const entry: ServerEntry = { tools: new Map(), watchers: new Map() };
  SERVERS.set(server, entry);
  // Called below with the server's own `this`, as the wrapper it is replaced by.
  // eslint-disable-next-line @typescript-eslint/unbound-method
  const own = low.setRequestHandler;
  const wrapping = function (this: typeof low, method: string, ...rest: unknown[]) {
    if (method === 'tools/call' && typeof rest[0] === 'function') {
      const inner = rest[0] as (request: never, ctx: ServerContext) => Promise<unknown>;
      rest[0] = async (request: never, ctx: ServerContext) => {
        prepare(server, entry, request, ctx);
        return inner(request, ctx);
      };
      delete (low as { setRequestHandler?: unknown }).setRequestHandler; // once is enough
    }
    return (own as (...a: unknown[]) => unknown).call(this, method, ...rest);
  };
  (low as { setRequestHandler: unknown }).setRequestHandler = wrapping;
  // A session's watchers end with it.
  const onclose = low.onclose;
  low.onclose = () => {
    for (const w of entry.watchers.values()) w.abort();
    entry.watchers.clear();
    onclose?.();
  };
  return entry;
}

/** The validated arguments name another provider than the token would be fetched for. */
function providerChanged(sent: string, validated: string | undefined): CallToolResult {
  return {
    content: [
      {
        type: 'text',
        text:
          `The tool's input schema changed the provider argument (${JSON.stringify(sent)} became ${JSON.stringify(validated ?? null)}): ` +
          'refused, so that no provider\'s token is handed to a call for another.',
      },
    ],
    isError: true,
  };
}

export class McpConnect extends ConnectGate {
  /**
   * Registers `name` on `server` as a tool that needs the user's token at a provider.
   * `handler` runs only once mcp-connect says the user is connected (with the token, or,
   * where the tenant hands out none, `conn.fetch` through its proxy); otherwise, or when
   * the body throws its fetch's ConnectRequiredError, the adapter answers (input_required,
   * -32042, or a "not connected" / setup-link result). Register
   * connected tools before the server's other tools, and leave ServerOptions.requestState
   * unset: the adapter opens its own mcs2 state.
   */
  registerTool<Args = Record<string, unknown>>(
    server: McpServer,
    name: string,
    config: ToolConfig,
    options: ConnectedToolOptions,
    handler: ConnectedToolHandler<Args>,
  ) {
    providerOf(options, {}); // fails now, not at the first call, without provider or providerArg
    const entry = entryOf(server);
    entry.tools.set(name, { gate: this, options });
    const callback = async (...a: unknown[]): Promise<CallToolResult> => {
      // With an inputSchema the SDK calls (args, ctx), without one (ctx).
      const [args, ctx] = (a.length >= 2 ? a : [{}, a[0]]) as [Args, ServerContext];
      const prepared = PREPARED.get(ctx);
      if (prepared === undefined) throw new Error('mcp-connect: the tools/call wrapper did not run');
      if ('result' in prepared) return prepared.result;
      // The wrapper read the provider from the arguments as sent; the body gets them as
      // the inputSchema made them. A schema that coerces, defaults or transforms could
      // make the two name different providers: the body would get one provider's token
      // for a call to another. Refuse, before anything is asked.
      if (a.length >= 2 && options.providerArg !== undefined) {
        const validated = providerOf(options, args);
        if (validated !== prepared.call.provider) return providerChanged(prepared.call.provider, validated);
      }
      const access = await this.access(prepared.call, prepared.resumed);
      return this.#answer(server, entry, prepared.call, access, args, ctx, handler);
    };
    // Which overload `config` fits is the caller's business; the callback fits both.
    return server.registerTool(name, config as never, callback as never);
  }

  async #answer<Args>(
    server: McpServer,
    entry: ServerEntry,
    call: Call,
    access: Access,
    args: Args,
    ctx: ServerContext,
    handler: ConnectedToolHandler<Args>,
  ): Promise<CallToolResult> {
    switch (access.kind) {
      case 'token': {
        const ran = await this.connected(call, access.outcome, (conn) => handler(args, conn, ctx));
        // The body's fetch met connect_required: answered as /v1/token's would have been.
        return 'result' in ran ? ran.result : this.#answer(server, entry, call, ran.access, args, ctx, handler);
      }
      case 'result':
        return access.result;
      case 'input_required':
        return inputRequired({
          inputRequests: { [INPUT_KEY]: inputRequired.elicitUrl({ message: access.message, url: access.url }) },
          ...(access.requestState !== undefined && { requestState: access.requestState }),
        }) as unknown as CallToolResult;
      case 'error_32042': {
        this.#watch(server, entry, call.subject, access.elicitationId, access.expiresAt);
        throw new UrlElicitationRequiredError(access.elicitations as never, access.message);
      }
    }
  }

  /** notifications/elicitation/complete on this session when the connect finishes. */
  #watch(server: McpServer, entry: ServerEntry, subject: string, id: string, expiresAt: number): void {
    if (entry.watchers.has(id)) return;
    const controller = new AbortController();
    entry.watchers.set(id, controller);
    const notify = server.server.createElicitationCompletionNotifier(id);
    void this.watchCompletion(id, expiresAt, notify, controller.signal, subject).finally(() => {
      if (entry.watchers.get(id) === controller) entry.watchers.delete(id);
    });
  }
}

export interface ConnectHandlerOptions {
  onerror?: (error: Error) => void;
  /** 2025-11-25 sessions held at once (default 1,000); past that, 503. */
  maxSessions?: number;
  /**
   * 2025-11-25 sessions one owner (subject) holds at once (default 16); past that, that
   * owner's least recently used session is closed to make room. Sessions without an
   * owner (no authenticated subject) are bounded by maxSessions only.
   */
  maxSessionsPerOwner?: number;
  /**
   * A 2025-11-25 session without a request for this long is closed when room is needed
   * (default 30 minutes): clients rarely end their sessions with DELETE.
   */
  idleTimeoutMs?: number;
  /** Who owns a session: the same subject as the gate's (default `authInfo.extra.sub`). */
  subjectOf?: (authInfo: AuthInfo | undefined) => string | undefined;
}

export interface ConnectHandler {
  fetch(request: Request, options?: { authInfo?: AuthInfo }): Promise<Response>;
  close(): Promise<void>;
}

function jsonRpcError(status: number, code: number, message: string): Response {
  return Response.json({ jsonrpc: '2.0', error: { code, message }, id: null }, { status });
}

/** A 2025-11-25 session, from the moment its initialize took a slot. */
interface Session {
  owner: string | undefined;
  /** Set once the transport has initialized it; until then the slot is only reserved. */
  id?: string;
  transport?: WebStandardStreamableHTTPServerTransport;
  /** Date.now() of its last request. */
  seen: number;
}

/**
 * One HTTP handler for both revisions. 2026-07-28 requests go to the SDK's per-request
 * handler (createMcpHandler). 2025-era requests get real sessions, which URL elicitation
 * needs there: the -32042 retry is reconciled per session, and
 * notifications/elicitation/complete goes out on the session after the call has ended (the
 * SDK's stateless 2025 fallback has neither). Each session belongs to the subject that
 * opened it; another user presenting its id is answered as if it did not exist.
 *
 * The table is bounded: maxSessions in all, maxSessionsPerOwner per subject (one user
 * cannot fill it). An initialize takes its slot before the server is made and connected,
 * so concurrent initializes cannot go past either limit.
 */
export function createConnectHandler(factory: McpServerFactory, options: ConnectHandlerOptions = {}): ConnectHandler {
  const modern = createMcpHandler(factory, { legacy: 'reject', ...(options.onerror && { onerror: options.onerror }) });
  /** Initialized sessions, by id. */
  const sessions = new Map<string, Session>();
  /** Every session holding a slot (initialized or still opening). */
  const slots = new Set<Session>();
  /** Each owner's sessions, least recently used first (a Set keeps insertion order). */
  const byOwner = new Map<string, Set<Session>>();
  const max = options.maxSessions ?? 1000;
  const perOwner = options.maxSessionsPerOwner ?? 16;
  if (!(max >= 1 && perOwner >= 1)) throw new RangeError('maxSessions and maxSessionsPerOwner are at least 1');
  const idle = options.idleTimeoutMs ?? 30 * 60_000;
  const ownerOf = options.subjectOf ?? defaultSubjectOf;

  function reserve(owner: string | undefined): Session {
    const s: Session = { owner, seen: Date.now() };
    slots.add(s);
    if (owner !== undefined) {
      let own = byOwner.get(owner);
      if (own === undefined) byOwner.set(owner, (own = new Set()));
      own.add(s);
    }
    return s;
  }

  /** Gives the slot back; closes the session's transport (if it has one and is not closing it already). */
  function release(s: Session, close: boolean): void {
    if (!slots.delete(s)) return;
    if (s.id !== undefined && sessions.get(s.id) === s) sessions.delete(s.id);
    if (s.owner !== undefined) {
      const own = byOwner.get(s.owner);
      own?.delete(s);
      if (own?.size === 0) byOwner.delete(s.owner);
    }
    if (close) void s.transport?.close().catch(() => {});
  }

  function touch(s: Session): void {
    s.seen = Date.now();
    if (s.owner === undefined) return;
    const own = byOwner.get(s.owner);
    if (own?.delete(s)) own.add(s); // now the most recently used
  }

  function evictIdle(): void {
    const before = Date.now() - idle;
    for (const s of sessions.values()) if (s.seen <= before) release(s, true);
  }

  async function legacy(request: Request, authInfo: AuthInfo | undefined): Promise<Response> {
    const id = request.headers.get('mcp-session-id');
    if (id !== null) {
      const s = sessions.get(id);
      if (s === undefined || s.transport === undefined || s.owner !== ownerOf(authInfo)) return jsonRpcError(404, -32001, 'Session not found');
      touch(s);
      return s.transport.handleRequest(request, authInfo ? { authInfo } : {});
    }
    const body: unknown = request.method === 'POST' ? await request.clone().json().catch(() => undefined) : undefined;
    if (!isInitializeRequest(body)) return jsonRpcError(400, -32000, 'Bad Request: No valid session ID provided');
    const owner = ownerOf(authInfo);
    // From here to reserve() nothing awaits: the checks and the reservation are one step.
    const own = owner === undefined ? undefined : byOwner.get(owner);
    if (own !== undefined && own.size >= perOwner) {
      // The owner's least recently used session that is open (one still opening cannot
      // be closed; if all are, the owner is refused).
      const lru = [...own].find((s) => s.transport !== undefined && s.id !== undefined);
      if (lru === undefined) return jsonRpcError(503, -32000, 'Too many sessions');
      release(lru, true);
    }
    if (slots.size >= max) evictIdle();
    if (slots.size >= max) return jsonRpcError(503, -32000, 'Too many sessions');
    const slot = reserve(owner);
    try {
      const transport: WebStandardStreamableHTTPServerTransport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableJsonResponse: true,
        onsessioninitialized: (sid) => {
          if (!slots.has(slot)) return; // evicted while opening
          slot.id = sid;
          slot.seen = Date.now();
          sessions.set(sid, slot);
        },
        onsessionclosed: () => release(slot, false),
      });
      slot.transport = transport;
      transport.onclose = () => release(slot, false);
      const server = await factory({ era: 'legacy', ...(authInfo && { authInfo }), requestInfo: request });
      await server.connect(transport);
      const response = await transport.handleRequest(request, authInfo ? { authInfo } : {});
      if (slot.id === undefined) release(slot, true); // the initialize failed: no session
      return response;
    } catch (e) {
      release(slot, true);
      throw e;
    }
  }

  return {
    async fetch(request, opts = {}) {
      if (await isLegacyRequest(request)) return legacy(request, opts.authInfo);
      return modern.fetch(request, opts.authInfo ? { authInfo: opts.authInfo } : {});
    },
    async close() {
      await modern.close();
      const all = [...slots];
      slots.clear();
      sessions.clear();
      byOwner.clear();
      await Promise.all(all.flatMap((s) => (s.transport === undefined ? [] : [s.transport.close().catch(() => {})])));
    },
  };
}
