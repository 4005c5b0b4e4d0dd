// The mcp-connect wiring of a tool that needs the user's downstream token, independent of
// the MCP SDK (the adapters in server.ts and sdk.ts feed it). Same behaviour as the Rust
// example's `downstream_token` (crates/example-mcp-server/src/whoami.rs):
//
// - a 2026-07-28 retry names the elicitation of round one in the sealed requestState; a
//   2025-11-25 retry has none, so the id handed out with the -32042 is remembered per
//   (session, subject, tool, arguments);
// - `decline`/`cancel` in the client closes the link at mcp-connect and ends in a normal
//   "not connected" result, no new prompt; `accept` only means the link was opened, so
//   mcp-connect is asked (waiting a little for the connect to commit);
// - connect_required becomes an `input_required` result (2026-07-28 with elicitation.url
//   on the request), the -32042 error (2025-11-25 with elicitation.url declared at
//   initialize), or a normal result naming the link (anything else; never a form);
// - the tool body gets a `fetch` bound to mcp-connect's proxy for the call's provider and
//   user; a ConnectRequiredError that fetch throws (the proxy found no usable connection)
//   is answered as /v1/token's connect_required would have been.

import { type AccessToken, SubjectToken } from './secret.js';
import { type TokenOutcome, isServerName } from './api.js';
import { ApiError, type ConnectClient, ConnectError, type ConnectErrorCode, ConnectRequiredError, type ProxyFetch } from './client.js';
import { type RequestStateKey, RequestStateError, openRequestState, sealRequestState } from './requestState.js';
import { PendingElicitations } from './pending.js';

export { PENDING_CAPACITY, PENDING_PER_SUBJECT, PendingElicitations } from './pending.js';

/** Our key in `inputRequests` / `inputResponses`. */
export const INPUT_KEY = 'connect';
/** URLElicitationRequiredError (2025-11-25). */
export const URL_ELICITATION_REQUIRED = -32042;
export const INVALID_PARAMS = -32602;
export const FIRST_MODERN_REVISION = '2026-07-28';
export const URL_MODE_REVISION = '2025-11-25';

/** How this request's client can be asked to open a URL. */
export type UrlElicitation = 'input_required' | 'error_32042' | 'setup_link';

/**
 * The decision, from the revision this request is served on and the client capabilities
 * that apply to it (2026-07-28: the request's own; before: those declared at initialize).
 * An `elicitation` without `url` (form only) is not URL support, and 2025-06-18 and earlier
 * had no URL mode whatever a client claims.
 */
export function urlElicitation(revision: string | undefined, capabilities: unknown): UrlElicitation {
  const elicitation: unknown = (capabilities as { elicitation?: unknown } | null | undefined)?.elicitation;
  const url = typeof elicitation === 'object' && elicitation !== null ? (elicitation as { url?: unknown }).url : undefined;
  const urlCapable = url !== undefined && url !== null;
  if (!urlCapable || revision === undefined) return 'setup_link';
  if (revision >= FIRST_MODERN_REVISION) return 'input_required';
  return revision === URL_MODE_REVISION ? 'error_32042' : 'setup_link';
}

/** A tool result, in the shape both SDKs accept. */
export interface ToolResult {
  content: Array<{ type: 'text'; text: string }>;
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
  [key: string]: unknown;
}

/**
 * The results the adapter answers with when the tool body does not run. `provider` is the
 * provider's id (as configured in mcp-connect, e.g. `github`); `providerName` its display
 * name (e.g. `GitHub`) where mcp-connect named it, else undefined (an older mcp-connect, or
 * the cancel of a declined link failed).
 */
export interface Results {
  /** Declined on the page or in the client. */
  notConnected(provider: string, providerName?: string): ToolResult;
  /** The client has no URL mode: the link to open outside the workflow. */
  setupLink(provider: string, url: string, providerName?: string): ToolResult;
  /** mcp-connect could not answer (its stable error code; no secret). */
  failed(provider: string, code: ConnectErrorCode): ToolResult;
  /** The provider argument names a provider this server does not serve. */
  unknownProvider(provider: string): ToolResult;
}

/**
 * The default texts, the same as the Rust example's (the cross-language tests read them):
 * they name the provider's display name, the provider id where there is none; the
 * structured content names the id.
 */
export const DEFAULT_RESULTS: Results = {
  notConnected: (provider, providerName = provider) => ({
    content: [{ type: 'text', text: `Not connected to ${providerName}: nothing was shared.` }],
    structuredContent: { connected: false, provider, setup_url: null },
  }),
  setupLink: (provider, url, providerName = provider) => ({
    content: [
      {
        type: 'text',
        text:
          `Not connected to ${providerName}. This client cannot open a connect page by itself: ` +
          `open ${url} in your browser to connect the account, then ask again.`,
      },
    ],
    structuredContent: { connected: false, provider, setup_url: url },
  }),
  failed: (_provider, code) => ({
    content: [{ type: 'text', text: `The connection service could not answer (${code}); try again later.` }],
    isError: true,
  }),
  unknownProvider: (provider) => ({
    content: [{ type: 'text', text: `This server does not know the provider ${JSON.stringify(provider)}.` }],
    isError: true,
  }),
};

/** Where log lines go. Fields never hold a secret. */
export interface Logger {
  warn(message: string, fields?: Record<string, unknown>): void;
}

/** The options of McpConnect (both adapters). */
export interface McpConnectOptions {
  client: ConnectClient;
  stateKey: RequestStateKey;
  /** wait_seconds on the retry after `accept` (default 20; 0 disables). */
  waitSeconds?: number;
  /** A requestState lives at most this long, and never beyond its elicitation (default 600 s). */
  stateTtlSeconds?: number;
  /** Replace some or all of the default results. */
  results?: Partial<Results>;
  logger?: Logger;
  /**
   * This MCP server's human-facing name, sent with every token request (`server_name`):
   * mcp-connect's elicitation message names it ("Whoami Tools needs access to your GitHub
   * account. ..."; without it, the tenant's display name). 1 to 64 characters, none a
   * control or invisible formatting character; another is left out (with a warning), the
   * tool calls go on. Not read off the McpServer: neither SDK has a public accessor for the
   * name it was made with.
   */
  serverName?: string;
  /**
   * The subject of a request, from the SDK's AuthInfo of the validated access token
   * (default: `authInfo.extra.sub`). Never from tool arguments.
   */
  subjectOf?: (authInfo: AuthInfoLike | undefined) => string | undefined;
  /**
   * The validated access token itself, sent as `subject_token` so that mcp-connect checks
   * whose token is asked for (default: `authInfo.token`). The tenant needs a
   * `subject_token_audience` (this server's resource URL); without one, pass `() => undefined`.
   */
  subjectTokenOf?: (authInfo: AuthInfoLike | undefined) => SubjectToken | undefined;
  /**
   * 2025-11-25 completion watchers (one long poll per elicitation, shared by the sessions
   * waiting on it) held at once (default 10,000); past that, a new one is not started.
   */
  maxWatchers?: number;
  /** Of those, one subject's at most (default 4); past that, the subject's oldest stops. */
  maxWatchersPerSubject?: number;
  /** For tests: the clock, in Unix seconds. */
  now?: () => number;
}

/** The part of the SDKs' AuthInfo the gate reads. */
export interface AuthInfoLike {
  token?: string | undefined;
  extra?: Record<string, unknown> | undefined;
}

export function defaultSubjectTokenOf(authInfo: AuthInfoLike | undefined): SubjectToken | undefined {
  const token = authInfo?.token;
  return typeof token === 'string' && token.length > 0 ? new SubjectToken(token) : undefined;
}

export function defaultSubjectOf(authInfo: AuthInfoLike | undefined): string | undefined {
  const sub = authInfo?.extra?.sub;
  return typeof sub === 'string' && sub.length > 0 ? sub : undefined;
}

/** How a connected tool names its provider. */
export interface ConnectedToolOptions {
  /** A fixed provider name, as configured in mcp-connect. */
  provider?: string;
  /** Or: the tool argument that names it (e.g. `provider` for `whoami_on(provider)`). */
  providerArg?: string;
  /** With providerArg: the providers this server serves; others get `unknownProvider`. */
  knownProviders?: Iterable<string>;
  /** Scopes beyond the provider's configured default. */
  scopes?: string[];
}

/** The provider of a call, `undefined` when the arguments name none. */
export function providerOf(options: ConnectedToolOptions, args: unknown): string | undefined {
  if (options.provider !== undefined) return options.provider;
  if (options.providerArg === undefined) throw new TypeError('a connected tool needs provider or providerArg');
  const v = (args as Record<string, unknown> | null | undefined)?.[options.providerArg];
  return typeof v === 'string' && v.length > 0 ? v : undefined;
}

export function isKnownProvider(options: ConnectedToolOptions, provider: string): boolean {
  return options.knownProviders === undefined || new Set(options.knownProviders).has(provider);
}

/** One tools/call of a connected tool, with everything the decision needs. */
export interface Call {
  subject: string;
  /** The access token the subject was taken from, for mcp-connect to check. */
  subjectToken?: SubjectToken | undefined;
  provider: string;
  tool: string;
  /** The arguments as the client sent them. */
  arguments: unknown;
  /** The client's `action` for our input request on a 2026-07-28 retry. */
  answer?: string | undefined;
  mode: UrlElicitation;
  /** The MCP session (2025-11-25), if any. */
  sessionId?: string | undefined;
  scopes?: string[] | undefined;
}

type Connected = Extract<TokenOutcome, { status: 'connected' }>;

/** What a connected tool's body gets besides its arguments (both adapters). */
export interface Connection {
  provider: string;
  /**
   * The user's credential at the provider: `token.reveal()` for the provider call only.
   * Where the tenant hands out none (`outcome.handOut` is `none`), reading it throws: call
   * the provider through `fetch`.
   */
  readonly token: AccessToken;
  outcome: Connected;
  /**
   * A `fetch` to the provider's API through mcp-connect's proxy, as this call's user (with
   * the subject token the gate forwards, the tool's scopes and the server's name):
   * `await conn.fetch('/user')`. The credential never reaches this process. Its
   * ConnectRequiredError, thrown out of the body (also as another error's `cause`), is
   * answered with the elicitation, as a connect_required of /v1/token is.
   */
  fetch: ProxyFetch;
}

/** The Connection of one call: the token read through an accessor that says why it is absent. */
class CallConnection implements Connection {
  constructor(
    readonly provider: string,
    readonly outcome: Connected,
    readonly fetch: ProxyFetch,
  ) {}

  get token(): AccessToken {
    if (this.outcome.token === null) {
      throw new Error(
        `mcp-connect handed out no credential for ${this.provider} (this tenant keeps credentials in mcp-connect): ` +
          "call the provider's API through conn.fetch, mcp-connect's proxy",
      );
    }
    return this.outcome.token;
  }
}

/** `e` and its causes, the ones a library that wraps an error keeps (a few deep). */
function causes(e: unknown): unknown[] {
  const out: unknown[] = [];
  try {
    for (let x = e; out.length < 8 && typeof x === 'object' && x !== null; x = (x as { cause?: unknown }).cause) out.push(x);
  } catch {
    // A `cause` getter that throws: what was read so far.
  }
  return out;
}

/** What the adapter does about the downstream token. */
export type Access =
  | { kind: 'token'; outcome: Connected }
  | { kind: 'input_required'; message: string; url: string; requestState?: string }
  | { kind: 'error_32042'; message: string; elicitations: Array<Record<string, string>>; elicitationId: string; expiresAt: number }
  | { kind: 'result'; result: ToolResult };

/** The elicitation an earlier round handed out, if this call resumes one. */
export type Resumed = string | undefined;

/** Completion watchers (one long poll per elicitation) held at once, in all. */
export const MAX_WATCHERS = 10_000;
/** Completion watchers one subject may hold at once (past that, its oldest stops). */
export const MAX_WATCHERS_PER_SUBJECT = 4;
/** A pending answer quicker than this means mcp-connect did not hold the request. */
const QUICK_ANSWER_MS = 1_000;
/** The first pause before asking again after such an answer (or an error), doubled up to the max. */
const FIRST_PAUSE_MS = 2_000;
const MAX_PAUSE_MS = 30_000;

/** One long poll of an elicitation, and the sessions waiting on it. */
interface Poll {
  id: string;
  subject: string;
  expiresAt: number;
  controller: AbortController;
  waiting: Set<{ notify: () => Promise<void>; done: () => void }>;
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) {
      resolve();
      return;
    }
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, ms));
    // Timers of other runtimes (or DOM typings) may have no unref.
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition
    timer.unref?.();
    signal.addEventListener('abort', done, { once: true });
  });
}

/** The SDK-independent part of the adapters: decides, asks mcp-connect, seals. */
export class ConnectGate {
  readonly client: ConnectClient;
  readonly results: Results;
  readonly #key: RequestStateKey;
  readonly #wait: number;
  readonly #ttl: number;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #serverName: string | undefined;
  readonly subjectOf: (authInfo: AuthInfoLike | undefined) => string | undefined;
  readonly subjectTokenOf: (authInfo: AuthInfoLike | undefined) => SubjectToken | undefined;
  readonly legacy = new PendingElicitations();
  readonly #maxWatchers: number;
  readonly #maxWatchersPerSubject: number;
  /** The running long polls, by elicitation id. */
  readonly #polls = new Map<string, Poll>();
  /** Each subject's polls (elicitation ids), oldest first. */
  readonly #pollsBySubject = new Map<string, Set<string>>();

  constructor(options: McpConnectOptions) {
    this.client = options.client;
    this.#key = options.stateKey;
    this.#wait = options.waitSeconds ?? 20;
    if (!Number.isInteger(this.#wait) || this.#wait < 0 || this.#wait > 30) throw new RangeError('waitSeconds is an integer from 0 to 30');
    this.#ttl = options.stateTtlSeconds ?? 600;
    this.results = { ...DEFAULT_RESULTS, ...options.results };
    this.#log = options.logger ?? { warn: (m, f) => console.warn(`mcp-connect: ${m}`, f ?? '') };
    this.#now = options.now ?? (() => Date.now() / 1000);
    this.#serverName = options.serverName;
    if (this.#serverName !== undefined && !isServerName(this.#serverName)) {
      // The name is left out of the log too: it is what could not be shown.
      this.#log.warn('serverName is not 1 to 64 characters without control or invisible formatting characters: not sent');
      this.#serverName = undefined;
    }
    this.subjectOf = options.subjectOf ?? defaultSubjectOf;
    this.subjectTokenOf = options.subjectTokenOf ?? defaultSubjectTokenOf;
    this.#maxWatchers = options.maxWatchers ?? MAX_WATCHERS;
    this.#maxWatchersPerSubject = options.maxWatchersPerSubject ?? MAX_WATCHERS_PER_SUBJECT;
    if (!(this.#maxWatchers >= 1 && this.#maxWatchersPerSubject >= 1)) throw new RangeError('maxWatchers and maxWatchersPerSubject are at least 1');
  }

  now(): number {
    return this.#now();
  }

  /**
   * The elicitation this call resumes: from the requestState (2026-07-28), or remembered
   * for the session (2025-11-25). Throws RequestStateError (malformed / invalid) for a
   * state that must be refused with -32602; an expired one starts over, except that a
   * `decline`/`cancel` answering it still names its elicitation (which may outlive the
   * state by hours), so that the link is closed at mcp-connect.
   */
  resume(call: Pick<Call, 'subject' | 'tool' | 'arguments' | 'sessionId'> & Partial<Pick<Call, 'answer'>>, requestState: unknown): Resumed {
    if (requestState !== undefined && requestState !== null) {
      if (typeof requestState !== 'string') throw new RequestStateError('malformed');
      try {
        return openRequestState(requestState, this.#key, call, this.#now()).elicitationId;
      } catch (e) {
        if (e instanceof RequestStateError && e.reason === 'expired') {
          // Authentic (it opened), only too old. An accept starts over; a decline/cancel
          // has nothing to start, but its link must stop working.
          const closing = call.answer === 'decline' || call.answer === 'cancel';
          return closing ? e.expiredState?.elicitationId : undefined;
        }
        throw e;
      }
    }
    const key = PendingElicitations.key(call.sessionId, call.subject, call.tool, call.arguments);
    return key === undefined ? undefined : this.legacy.take(key, this.#now());
  }

  /** The token, or what to answer instead. */
  async access(call: Call, resumed: Resumed): Promise<Access> {
    const { answer, provider } = call;
    // `decline`/`cancel` is an answer, not an error: no new prompt, and the link it
    // answered is closed at mcp-connect (opened later, it connects nothing).
    if (answer === 'decline' || answer === 'cancel') {
      // The cancel's answer names whose link it was: its display name for the text (not
      // if the link was another provider's).
      let providerName: string | undefined;
      if (resumed !== undefined) {
        try {
          const cancelled = await this.client.cancelElicitation(resumed, answer);
          if (cancelled.provider === null || cancelled.provider === provider) providerName = cancelled.providerName ?? undefined;
        } catch (e) {
          this.#log.warn('could not close the link at mcp-connect', { code: e instanceof ConnectError ? e.code : 'error' });
        }
      }
      return { kind: 'result', result: this.results.notConnected(provider, providerName) };
    }
    if (answer !== undefined && answer !== 'accept') return { kind: 'result', result: this.results.notConnected(provider) };
    let outcome: TokenOutcome;
    try {
      // `accept` only means the user opened the link; mcp-connect knows the outcome.
      outcome = await this.client.token({
        subject: call.subject,
        ...(call.subjectToken !== undefined && { subjectToken: call.subjectToken }),
        provider,
        ...(call.scopes !== undefined && { scopes: call.scopes }),
        ...(resumed !== undefined && { elicitationId: resumed }),
        // Wait only on the 2026-07-28 retry after `accept`: a 2025-11-25 call has no
        // answer, and its client learns of the end from notifications/elicitation/complete
        // (a host asking again later must not stall on a link the user left).
        ...(resumed !== undefined && answer === 'accept' && this.#wait > 0 && { waitSeconds: this.#wait }),
        ...(call.sessionId !== undefined && { mcpSessionId: call.sessionId }),
        ...(this.#serverName !== undefined && { serverName: this.#serverName }),
      });
    } catch (e) {
      const code = e instanceof ConnectError ? e.code : 'unavailable';
      if (!(e instanceof ConnectError)) this.#log.warn('token request failed', { error: e instanceof Error ? e.name : 'error' });
      return { kind: 'result', result: this.results.failed(provider, code) };
    }
    switch (outcome.status) {
      case 'connected':
        return { kind: 'token', outcome };
      case 'declined':
        return { kind: 'result', result: this.results.notConnected(provider, outcome.providerName ?? undefined) };
      case 'connect_required':
        return this.elicit(call, outcome);
    }
  }

  /**
   * Runs a connected tool's body with its Connection, whose `fetch` goes through the proxy
   * for this call's provider and user. A ConnectRequiredError that this fetch threw, thrown
   * out of the body (or as the `cause` of what it threw), becomes `{ access }`: what a
   * connect_required of /v1/token would have answered. Another one (another provider's or
   * user's proxy) is not this call's to prompt for: thrown on, as anything else.
   */
  async connected<R>(call: Call, outcome: Connected, body: (conn: Connection) => R | Promise<R>): Promise<{ result: R } | { access: Exclude<Access, { kind: 'token' }> }> {
    const ours = new WeakSet<ConnectRequiredError>();
    let proxy: ProxyFetch | undefined;
    const fetch: ProxyFetch = async (input, init) => {
      // Made at the first call: a body that never calls it cannot fail on its options.
      proxy ??= this.client.proxyFetch({
        provider: call.provider,
        subject: call.subject,
        ...(call.subjectToken !== undefined && { subjectToken: call.subjectToken }),
        ...(call.scopes !== undefined && { scopes: call.scopes }),
        ...(this.#serverName !== undefined && { serverName: this.#serverName }),
      });
      try {
        return await proxy(input, init);
      } catch (e) {
        if (e instanceof ConnectRequiredError) ours.add(e);
        throw e;
      }
    };
    try {
      return { result: await body(new CallConnection(call.provider, outcome, fetch)) };
    } catch (e) {
      const required = causes(e).find((c): c is ConnectRequiredError => c instanceof ConnectRequiredError && ours.has(c));
      if (required === undefined) throw e;
      return { access: this.elicit(call, required.outcome) };
    }
  }

  /**
   * What to answer for a connect_required (of /v1/token, or of the proxy the body called):
   * `input_required` with a sealed requestState, the -32042 error, or the setup link.
   */
  elicit(call: Call, outcome: Extract<TokenOutcome, { status: 'connect_required' }>): Exclude<Access, { kind: 'token' }> {
    const { provider } = call;
    const { elicitation, mcp } = outcome;
    const expiresAt = Math.floor(elicitation.expiresAt.getTime() / 1000);
    const now = this.#now();
    switch (call.mode) {
      case 'input_required': {
        // 2026-07-28's URL mode has no elicitationId: correlation is our sealed state.
        try {
          const deadline = Math.min(expiresAt, Math.floor(now + this.#ttl));
          const requestState = sealRequestState(this.#key, call, { elicitationId: elicitation.id, expiresAt: deadline });
          return { kind: 'input_required', message: mcp.message, url: mcp.url, requestState };
        } catch {
          // Arguments without a canonical form cannot be bound: ask again without a state.
          return { kind: 'input_required', message: mcp.message, url: mcp.url };
        }
      }
      case 'error_32042': {
        const key = PendingElicitations.key(call.sessionId, call.subject, call.tool, call.arguments);
        if (key !== undefined) this.legacy.remember(key, elicitation.id, expiresAt, now, call.subject);
        const params = { mode: 'url', message: mcp.message, url: mcp.url, elicitationId: mcp.elicitationId };
        return { kind: 'error_32042', message: mcp.message, elicitations: [params], elicitationId: elicitation.id, expiresAt };
      }
      case 'setup_link':
        return { kind: 'result', result: this.results.setupLink(provider, elicitation.url, outcome.providerName ?? undefined) };
    }
  }

  /**
   * 2025-11-25: waits (`GET /v1/elicitations/{id}?wait_seconds=30`, or less when the
   * elicitation expires sooner; repeatedly) until the elicitation is no longer pending,
   * then calls `notify` if it completed. Ends at the elicitation's expiry, when `signal`
   * aborts (the session ended), or on a refusal. `subject` is whose elicitation it is.
   *
   * One long poll per elicitation id, whatever the number of sessions waiting on it: a
   * second watch of the same id joins the first and is notified with it; the poll stops
   * when the last of them aborts. When mcp-connect answers `pending` at once (it does
   * not hold requests just now), the next ask waits: about 2 s, doubling up to 30 s,
   * with jitter. Bounded: `maxWatchersPerSubject` polls of one subject (past that, the
   * subject's oldest stops) and `maxWatchers` in all (past that, none is started; the
   * client can still repeat the call).
   */
  watchCompletion(id: string, expiresAt: number, notify: () => Promise<void>, signal: AbortSignal, subject: string): Promise<void> {
    if (signal.aborted || this.#now() >= expiresAt) return Promise.resolve();
    let poll = this.#polls.get(id);
    if (poll === undefined) {
      const own = this.#pollsBySubject.get(subject);
      if (own !== undefined && own.size >= this.#maxWatchersPerSubject) {
        const oldest = this.#polls.get(own.values().next().value as string);
        if (oldest !== undefined) this.#endPoll(oldest);
      }
      if (this.#polls.size >= this.#maxWatchers) {
        this.#log.warn('too many completion watchers: this one is not started');
        return Promise.resolve();
      }
      poll = { id, subject, expiresAt, controller: new AbortController(), waiting: new Set() };
      this.#polls.set(id, poll);
      let mine = this.#pollsBySubject.get(subject);
      if (mine === undefined) this.#pollsBySubject.set(subject, (mine = new Set()));
      mine.add(id);
      const started = poll;
      void this.#runPoll(started).finally(() => this.#endPoll(started));
    } else if (expiresAt > poll.expiresAt) {
      poll.expiresAt = expiresAt;
    }
    const joined = poll;
    return new Promise<void>((resolve) => {
      const waiter = {
        notify,
        done: () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        joined.waiting.delete(waiter);
        waiter.done();
        if (joined.waiting.size === 0) this.#endPoll(joined); // nobody left to tell
      };
      joined.waiting.add(waiter);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** The number of running completion polls (for tests and metrics). */
  get watching(): number {
    return this.#polls.size;
  }

  async #runPoll(poll: Poll): Promise<void> {
    const { id, controller } = poll;
    const signal = controller.signal;
    let backoff = 0;
    // Waits before the next ask: about 2 s, then doubling up to 30 s, with jitter (so
    // watchers that met the same outage do not come back together); never past the
    // elicitation's expiry, and cut short by the abort.
    const wait = async () => {
      backoff = backoff === 0 ? FIRST_PAUSE_MS : Math.min(backoff * 2, MAX_PAUSE_MS);
      const jittered = backoff * (0.75 + Math.random() * 0.5);
      await pause(Math.min(jittered, (poll.expiresAt - this.#now()) * 1000), signal);
    };
    while (!signal.aborted && this.#now() < poll.expiresAt) {
      const waitSeconds = Math.max(1, Math.min(30, Math.ceil(poll.expiresAt - this.#now())));
      const asked = performance.now();
      let status: string;
      try {
        status = (await this.client.elicitation(id, { waitSeconds, signal })).status;
      } catch (e) {
        // The abort may have come while the request was out (narrowed by the loop test).
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition
        if (signal.aborted) return;
        if (e instanceof ApiError) {
          this.#log.warn('stopped watching an elicitation', { code: e.code });
          return;
        }
        await wait(); // unavailable for now: try again
        continue;
      }
      if (status === 'pending') {
        // Held for a while: mcp-connect is waiting for us, ask again at once. Answered at
        // once: it does not hold requests now (its listener down, draining, waits off or
        // its waiter cap full), and asking again at once would hammer it until expiry.
        if (performance.now() - asked < QUICK_ANSWER_MS) await wait();
        else backoff = 0;
        continue;
      }
      if (status === 'completed') {
        for (const w of [...poll.waiting]) {
          await Promise.resolve()
            .then(w.notify)
            .catch(() => this.#log.warn('could not send notifications/elicitation/complete (session gone?)'));
        }
      }
      return;
    }
  }

  /** Stops a poll and releases everyone waiting on it. */
  #endPoll(poll: Poll): void {
    if (this.#polls.get(poll.id) === poll) {
      this.#polls.delete(poll.id);
      const own = this.#pollsBySubject.get(poll.subject);
      own?.delete(poll.id);
      if (own?.size === 0) this.#pollsBySubject.delete(poll.subject);
    }
    poll.controller.abort();
    for (const w of poll.waiting) w.done();
    poll.waiting.clear();
  }
}
