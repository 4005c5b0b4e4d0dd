// The adapter for `@modelcontextprotocol/sdk` 1.32, which speaks the 2025 revisions
// (2025-11-25 has URL elicitation: the -32042 error, and
// notifications/elicitation/complete when the connect finishes). It has no
// `input_required`, so there is no requestState here: the -32042 retry is reconciled per
// session.
//
//   const connect = new McpConnect({ client, stateKey });
//   const server = new McpServer({ name: 'whoami', version: '1.0.0' });
//   connect.registerTool(server, 'whoami_on', { inputSchema: { provider: z.string() } },
//     { providerArg: 'provider' }, async (args, conn) => ({ content: [...] }));

import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import {
  type CallToolResult,
  ErrorCode,
  McpError,
  type ServerNotification,
  type ServerRequest,
  UrlElicitationRequiredError,
} from '@modelcontextprotocol/sdk/types.js';
import {
  type Access,
  type Call,
  ConnectGate,
  type ConnectedToolOptions,
  type Connection,
  URL_MODE_REVISION,
  isKnownProvider,
  providerOf,
  urlElicitation,
} from './gate.js';

// The option and callback types McpConnect's signatures name (the same in both adapters).
export type { AuthInfoLike, ConnectedToolOptions, Connection, Logger, McpConnectOptions, Results, ToolResult } from './gate.js';

export type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;

export type ConnectedToolHandler<Args> = (args: Args, conn: Connection, extra: Extra) => CallToolResult | Promise<CallToolResult>;

/**
 * The second argument of McpServer.registerTool (title, description, inputSchema, ...),
 * read off the method's signature. (`Parameters<>` yields `never` here, as the SDK's
 * callback type does not fit `(...args: any) => any`, and no config would type-check.)
 */
export type ToolConfig = McpServer['registerTool'] extends (name: string, config: infer C, ...rest: never[]) => unknown ? C : never;

/**
 * The revision of this request: the MCP-Protocol-Version header Streamable HTTP clients
 * send after initialize. Without it (stdio), a client that declared elicitation.url can
 * only be speaking 2025-11-25, the first revision that has it.
 */
function revisionOf(extra: Extra, capabilities: unknown): string | undefined {
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- headers as the SDK types them; kept optional for transports that leave them out
  const h = extra.requestInfo?.headers?.['mcp-protocol-version'];
  const header = Array.isArray(h) ? h[0] : h;
  if (typeof header === 'string') return header;
  return urlElicitation(URL_MODE_REVISION, capabilities) === 'error_32042' ? URL_MODE_REVISION : undefined;
}

const WATCHERS = new WeakMap<McpServer, Map<string, AbortController>>();

function watchersOf(server: McpServer): Map<string, AbortController> {
  let w = WATCHERS.get(server);
  if (w === undefined) {
    const map = new Map<string, AbortController>();
    w = map;
    WATCHERS.set(server, map);
    // A session's watchers end with it.
    const onclose = server.server.onclose;
    server.server.onclose = () => {
      for (const c of map.values()) c.abort();
      map.clear();
      onclose?.();
    };
  }
  return w;
}

export class McpConnect extends ConnectGate {
  /**
   * Registers `name` on `server` as a tool that needs the user's token at a provider.
   * `handler` runs only once mcp-connect says the user is connected (with the token, or,
   * where the tenant hands out none, `conn.fetch` through its proxy); otherwise, or when
   * the body throws its fetch's ConnectRequiredError, the adapter answers (-32042, or a
   * "not connected" / setup-link result). The arguments digest of
   * the session memory is taken over the arguments as the SDK validated them.
   */
  registerTool<Args = Record<string, unknown>>(
    server: McpServer,
    name: string,
    config: ToolConfig,
    options: ConnectedToolOptions,
    handler: ConnectedToolHandler<Args>,
  ) {
    providerOf(options, {});
    const callback = async (...a: unknown[]): Promise<CallToolResult> => {
      // With an inputSchema the SDK calls (args, extra), without one (extra).
      const [args, extra] = (a.length >= 2 ? a : [{}, a[0]]) as [Args, Extra];
      const subject = this.subjectOf(extra.authInfo);
      if (subject === undefined) throw new McpError(ErrorCode.InternalError, 'no authenticated subject on the request');
      const provider = providerOf(options, args);
      if (provider === undefined) throw new McpError(ErrorCode.InvalidParams, `${options.providerArg ?? 'the provider'} is required`);
      if (!isKnownProvider(options, provider)) return this.results.unknownProvider(provider);
      const capabilities = server.server.getClientCapabilities();
      const call: Call = {
        subject,
        subjectToken: this.subjectTokenOf(extra.authInfo),
        provider,
        tool: name,
        arguments: args,
        mode: urlElicitation(revisionOf(extra, capabilities), capabilities),
        sessionId: extra.sessionId,
        scopes: options.scopes,
      };
      if (call.mode === 'input_required') call.mode = 'setup_link'; // this SDK cannot answer input_required
      const access = await this.access(call, this.resume(call, undefined));
      if (access.kind !== 'token') return this.#answer(server, subject, access);
      const ran = await this.connected(call, access.outcome, (conn) => handler(args, conn, extra));
      // The body's fetch met connect_required: answered as /v1/token's would have been.
      return 'result' in ran ? ran.result : this.#answer(server, subject, ran.access);
    };
    return server.registerTool(name, config, callback as never);
  }

  /** What the adapter answers instead of running the body. */
  #answer(server: McpServer, subject: string, access: Exclude<Access, { kind: 'token' }>): CallToolResult {
    switch (access.kind) {
      case 'result':
        return access.result;
      case 'input_required':
        throw new McpError(ErrorCode.InternalError, 'input_required is not available on this SDK');
      case 'error_32042': {
        this.#watch(server, subject, access.elicitationId, access.expiresAt);
        throw new UrlElicitationRequiredError(access.elicitations as never, access.message);
      }
    }
  }

  #watch(server: McpServer, subject: string, id: string, expiresAt: number): void {
    const watchers = watchersOf(server);
    if (watchers.has(id)) return;
    const controller = new AbortController();
    watchers.set(id, controller);
    const notify = server.server.createElicitationCompletionNotifier(id);
    void this.watchCompletion(id, expiresAt, notify, controller.signal, subject).finally(() => {
      if (watchers.get(id) === controller) watchers.delete(id);
    });
  }
}
