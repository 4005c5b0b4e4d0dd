// The HTTP side: global fetch with redirects refused, a timeout on every exchange, bounded
// answer bodies, the API key (or a token source's workload token, as it is when the request
// leaves: TokenFile, a function) on every call (never anywhere else), JSON errors mapped to
// ApiError with mcp-connect's stable code, and 503/429 with Retry-After retried within a
// RetryPolicy. Retrying is safe: /v1/token is idempotent and the other calls are a GET and
// a cancel that is harmless to repeat. proxyFetch is the other side: a fetch to a
// provider's API through mcp-connect's /v1/proxy, whose answers are the provider's own
// (streamed, any status, never retried here) unless MCP-Connect-Error says the proxy
// answered itself.

import type { BigIntStats } from 'node:fs';
import { type FileHandle, open, stat } from 'node:fs/promises';
import { getSystemErrorMap, inspect } from 'node:util';
import {
  type CancelReason,
  type CancelledInfo,
  type ElicitationInfo,
  type ErrorCode,
  type TokenBodyWire,
  type TokenOutcome,
  type TokenRequest,
  ShapeError,
  isElicitationId,
  isServerName,
  parseCancelled,
  parseElicitation,
  parseTokenAnswer,
} from './api.js';
import { ApiKey, Secret, type SubjectToken, WorkloadToken } from './secret.js';
import { type Environment, MissingSettingError, isMissing, keyOrTokenFile, setting } from './settings.js';

/** The largest answer body read; mcp-connect's answers are a few hundred bytes. */
export const MAX_BODY = 64 * 1024;

/** How long the client waits for mcp-connect to become available again. */
export interface RetryPolicy {
  /** Retries after the first attempt. */
  maxRetries: number;
  /** A Retry-After longer than this is not waited for: UnavailableError at once. */
  maxDelayMs: number;
  /** The sum of all waits stays within this. */
  maxTotalMs: number;
  /** The wait when a 503/429 carries no usable Retry-After. */
  defaultDelayMs: number;
}

export const DEFAULT_RETRY: Readonly<RetryPolicy> = Object.freeze({
  maxRetries: 2,
  maxDelayMs: 10_000,
  maxTotalMs: 15_000,
  defaultDelayMs: 1_000,
});

/**
 * The `code` of a ConnectError: one of the API's stable codes (`ErrorCode`), `unavailable`
 * (the request or its answer failed on the way: TransportError, InvalidResponseError; or
 * a token source had no token: WorkloadTokenError), or
 * `http_<status>` (an error answer without the API's JSON body).
 *
 * Open on purpose (`(string & {})`): mcp-connect documents that new codes may appear, and
 * a code a newer server sends arrives as it is rather than failing the call here. Editors
 * still offer the known codes; a `switch` over it needs a `default`.
 */
export type ConnectErrorCode = ErrorCode | 'unavailable' | `http_${number}` | (string & {});

/** Why a call did not produce an answer. `code` is what a tool may show (no secret). */
export class ConnectError extends Error {
  override readonly name: string = 'ConnectError';
  constructor(
    message: string,
    readonly code: ConnectErrorCode,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** mcp-connect refused the request with a stable error code (e.g. `provider_not_allowed`). */
export class ApiError extends ConnectError {
  override readonly name = 'ApiError';
  constructor(
    readonly status: number,
    code: ConnectErrorCode,
    readonly description: string,
  ) {
    super(`mcp-connect answered ${status}: ${code}: ${description}`, code);
  }
}

/** 503/429 and the retry budget is spent (or the server asked for a longer wait than allowed). */
export class UnavailableError extends ConnectError {
  override readonly name = 'UnavailableError';
  constructor(
    code: ConnectErrorCode,
    /** The server's Retry-After, in milliseconds, when it sent one. */
    readonly retryAfterMs: number | undefined,
  ) {
    super(`mcp-connect is temporarily unavailable (${code})`, code);
  }
}

/** The request did not reach mcp-connect, its answer did not arrive, or it redirected. */
export class TransportError extends ConnectError {
  override readonly name = 'TransportError';
  constructor(message: string, cause?: unknown) {
    super(message, 'unavailable', { cause });
  }
}

/** An answer that is not what the API documents (or is larger than MAX_BODY). */
export class InvalidResponseError extends ConnectError {
  override readonly name = 'InvalidResponseError';
  constructor(message: string) {
    super(`unexpected answer from mcp-connect: ${message}`, 'unavailable');
  }
}

/**
 * The workload token could not be had, so nothing was sent: the token file is missing,
 * unreadable, empty or holds no token, or the token function threw or returned none. The
 * message names the file (or what the function did), never the token; a function's own
 * error is the `cause`. Its `code` is `unavailable`.
 */
export class WorkloadTokenError extends ConnectError {
  override readonly name = 'WorkloadTokenError';
  constructor(message: string, cause?: unknown) {
    super(message, 'unavailable', cause === undefined ? undefined : { cause });
  }
}

/** A token file larger than this holds no token (and is not read whole). */
const MAX_TOKEN_FILE = 64 * 1024;

/** A token is one header value: visible ASCII, no white space. */
function checkedToken(text: string, what: string, empty: string): WorkloadToken {
  const token = text.trim();
  if (token === '') throw new WorkloadTokenError(empty);
  if (!/^[\x21-\x7e]+$/.test(token)) throw new WorkloadTokenError(`${what} holds no token (a token is one line of visible ASCII, without spaces)`);
  return new WorkloadToken(token);
}

/** Why a file could not be read, as the system says it (`no such file or directory`), never its content. */
function unreadable(path: string, e: unknown): WorkloadTokenError {
  const errno = (e as { errno?: unknown } | null)?.errno;
  const code = (e as { code?: unknown } | null)?.code;
  const why = (typeof errno === 'number' ? getSystemErrorMap().get(errno)?.[1] : undefined) ?? (typeof code === 'string' ? code : 'unreadable');
  return new WorkloadTokenError(`cannot read the token file ${path}: ${why}`);
}

/**
 * The workload token in the file at `path` (e.g. a Kubernetes projected service-account
 * token, `/var/run/secrets/tokens/mcp-connect`), without surrounding white space. Read when
 * first needed and again whenever the file changed: each request `stat`s it and compares
 * its inode, modification time and size (the kubelet moves a new file into place, by a
 * symlink swap, before the token expires). A file that is missing, unreadable, empty or
 * holds no token rejects with WorkloadTokenError, which names the path, never the content.
 * Prints as `TokenFile(<path>)`.
 */
export class TokenFile {
  readonly path: string;
  #held: { stamp: string; token: WorkloadToken } | undefined;

  constructor(path: string) {
    if (typeof path !== 'string' || path.trim() === '') throw new TypeError("TokenFile takes the token file's path (a non-empty string)");
    this.path = path;
  }

  /** The current token: the one read before while the file is unchanged, else the file read again. */
  async read(): Promise<WorkloadToken> {
    let st: BigIntStats;
    try {
      st = await stat(this.path, { bigint: true });
    } catch (e) {
      throw unreadable(this.path, e);
    }
    const held = this.#held;
    if (held !== undefined && held.stamp === stampOf(st)) return held.token;
    let file: FileHandle;
    let raw: Buffer;
    try {
      file = await open(this.path, 'r');
    } catch (e) {
      throw unreadable(this.path, e);
    }
    try {
      // The stamp of what is read (the path may change between the two).
      st = await file.stat({ bigint: true });
      raw = Buffer.alloc(MAX_TOKEN_FILE + 1);
      let size = 0;
      for (;;) {
        const { bytesRead } = await file.read(raw, size, raw.length - size, null);
        if (bytesRead === 0) break;
        size += bytesRead;
        if (size === raw.length) break;
      }
      raw = raw.subarray(0, size);
    } catch (e) {
      throw unreadable(this.path, e);
    } finally {
      await file.close();
    }
    const what = `the token file ${this.path}`;
    if (raw.length > MAX_TOKEN_FILE) throw new WorkloadTokenError(`${what} is larger than ${MAX_TOKEN_FILE / 1024} KiB: it holds no token`);
    if (raw.some((b) => b > 0x7f)) throw new WorkloadTokenError(`${what} holds no token (it is not ASCII text)`);
    const token = checkedToken(raw.toString('latin1'), what, `${what} is empty`);
    this.#held = { stamp: stampOf(st), token };
    return token;
  }

  toString(): string {
    return `TokenFile(${this.path})`;
  }

  toJSON(): string {
    return this.toString();
  }

  [inspect.custom](): string {
    return this.toString();
  }
}

function stampOf(st: BigIntStats): string {
  return `${st.ino}:${st.mtimeNs}:${st.size}`;
}

/** A function returning the current workload token, called for each request (and each retry). */
export type TokenFunction = () => string | Secret | Promise<string | Secret>;

/** Where the workload token comes from, in the API key's place: a TokenFile, or a function. */
export type TokenSource = TokenFile | TokenFunction;

/**
 * The proxy (`proxyFetch`) found no usable connection: mcp-connect answered `428
 * connect_required` with an elicitation for the user, `outcome` (as `token()`'s
 * `connect_required` outcome). Show it to the user (the adapters do when a tool body throws
 * this), then retry with its `elicitationId`. The message names neither the link (it is
 * for the user only) nor a secret.
 */
export class ConnectRequiredError extends ConnectError {
  override readonly name = 'ConnectRequiredError';
  /** The proxy's status, 428. */
  readonly status = 428;
  constructor(
    /** The provider whose proxy answered. */
    readonly provider: string,
    readonly outcome: Extract<TokenOutcome, { status: 'connect_required' }>,
    readonly description: string,
  ) {
    super(`mcp-connect answered 428: connect_required: ${description}`, 'connect_required');
  }
}

/** Whose credential the proxy attaches, and where it sends (`ConnectClient.proxyFetch`). */
export interface ProxyOptions {
  /** The provider's id in mcp-connect (`github`): the proxy sends to its API. */
  provider: string;
  /** The MCP user (the validated access token's `sub`); needed unless `subjectToken` proves it. */
  subject?: string;
  /** The user's validated MCP access token, proving the subject (as `subjectToken` of `token()`). */
  subjectToken?: SubjectToken;
  /** Scopes beyond the provider's configured default. */
  scopes?: string[];
  /** The retry after a ConnectRequiredError: its elicitation's id. */
  elicitationId?: string;
  /** This MCP server's name for the elicitation's message (as `serverName` of `token()`). */
  serverName?: string;
  /** Another of the provider's API origins than its first (`https://uploads.github.com`). */
  origin?: string;
}

/** A `fetch` to one provider's API through mcp-connect's proxy (`ConnectClient.proxyFetch`). */
export type ProxyFetch = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** On each answer the proxy makes itself (not the provider's): its error code. */
const PROXY_ERROR = 'mcp-connect-error';
/** A provider's id as mcp-connect takes it (its `ProviderId`). */
const PROVIDER_ID = /^[a-z0-9][a-z0-9_-]{0,63}$/;
/** RequestInit with the streaming-body option Node's fetch needs (not in the DOM typings). */
type ProxiedInit = RequestInit & { duplex?: 'half' };

/** `s` for an `MCP-Connect-*` header that mcp-connect percent-decodes. */
function headerText(s: unknown, what: string): string {
  if (typeof s !== 'string' || s.length === 0) throw new TypeError(`${what} is a non-empty string`);
  try {
    return encodeURIComponent(s);
  } catch {
    throw new TypeError(`${what} is not well-formed Unicode text`);
  }
}

/** `MCP-Connect-Origin`: an http(s) origin, serialised as mcp-connect compares it. */
function proxyOrigin(o: unknown): string {
  const url = typeof o === 'string' && URL.canParse(o) ? new URL(o) : undefined;
  if (
    url === undefined ||
    (url.protocol !== 'https:' && url.protocol !== 'http:') ||
    url.username !== '' ||
    url.password !== '' ||
    url.pathname !== '/' ||
    url.search !== '' ||
    url.hash !== ''
  ) {
    throw new TypeError('origin is an http(s) origin without a path, e.g. https://uploads.github.com');
  }
  return url.origin;
}

/**
 * The path and query (from `/`, without the fragment) the proxy is asked for. Refused where a
 * URL parser (fetch's own) would send another path than the one written, or to another host:
 * a dot segment (also `%2e`, also before a `;`), a backslash (read as a slash), an empty
 * segment (`//`). mcp-connect refuses these too, and more (an encoded slash or percent
 * sign), which come back as `proxy_path_refused`.
 */
function proxiedPath(rest: string): string {
  const target = rest.split('#')[0] ?? '';
  const q = target.indexOf('?');
  const path = q < 0 ? target : target.slice(0, q);
  const refuse = (why: string) => new TypeError(`the proxied path is refused: ${why}`);
  // Only what RFC 3986 allows as it is: a URL parser drops tabs and line breaks before it
  // resolves dot segments (`/.\t./` is `/../`), and would re-encode the rest.
  if (!/^[A-Za-z0-9\-._~!$&'()*+,;=:@%/]*$/u.test(path)) throw refuse('a character that must be percent-encoded');
  if (q >= 0 && !/^[A-Za-z0-9\-._~!$&'()*+,;=:@%/?]*$/u.test(target.slice(q + 1))) {
    throw refuse('a query character that must be percent-encoded');
  }
  if (path.includes('\\')) throw refuse('a backslash (a URL parser reads it as a slash)');
  const segments = path.slice(1).split('/');
  segments.forEach((segment, i) => {
    if (segment === '' && i + 1 < segments.length) throw refuse('an empty segment (//)');
    const name = (segment.split(';')[0] ?? '').replace(/%2e/giu, '.');
    if (name === '.' || name === '..') throw refuse('a dot segment');
  });
  return target;
}

/** What a ConnectClient takes besides its credential. */
export interface ConnectClientBaseOptions {
  /** mcp-connect's public base URL, e.g. `https://connect.example.com`. */
  baseUrl: string | URL;
  retry?: Partial<RetryPolicy>;
  /** The time one HTTP exchange may take beyond any wait_seconds (default 15 s). */
  timeoutMs?: number;
  /** For tests or instrumentation; defaults to the global fetch. */
  fetch?: typeof fetch;
}

/** A ConnectClient's options: exactly one credential, `apiKey` or `token`. */
export type ConnectClientOptions = ConnectClientBaseOptions &
  (
    | {
        /** The server-scope API key. A string is wrapped into an ApiKey at once. */
        apiKey: ApiKey | string;
        token?: never;
      }
    | {
        /**
         * A workload token source in the API key's place (docs/workload-identity.md): a
         * TokenFile, or a function returning the token (called for each request).
         */
        token: TokenSource;
        apiKey?: never;
      }
  );

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `Retry-After` as delay-seconds (RFC 9110 §10.2.3); an HTTP-date counts as absent. */
function retryAfterMs(h: Headers): number | undefined {
  const v = h.get('retry-after')?.trim();
  return v !== undefined && /^\d{1,9}$/.test(v) ? Number(v) * 1000 : undefined;
}

async function readBounded(resp: Response): Promise<Uint8Array> {
  const declared = Number(resp.headers.get('content-length'));
  if (declared > MAX_BODY) {
    await resp.body?.cancel();
    throw new InvalidResponseError('answer body too large');
  }
  if (resp.body === null) return new Uint8Array();
  const reader = resp.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > MAX_BODY) {
      await reader.cancel();
      throw new InvalidResponseError('answer body too large');
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks);
}

function json(body: Uint8Array): unknown {
  try {
    return JSON.parse(new TextDecoder().decode(body));
  } catch {
    return undefined;
  }
}

/** The API's `{"error", "error_description"}`, or a stand-in naming the status. */
function errorBody(body: Uint8Array, status: number): { code: ConnectErrorCode; description: string } {
  const v = json(body) as { error?: unknown; error_description?: unknown } | undefined;
  if (v && typeof v.error === 'string') {
    return { code: v.error, description: typeof v.error_description === 'string' ? v.error_description : '' };
  }
  return { code: `http_${status}`, description: 'the answer carried no JSON error body' };
}

function checkWait(wait: number | undefined): number | undefined {
  if (wait === undefined || wait === 0) return undefined;
  if (!Number.isInteger(wait) || wait < 0 || wait > 30) throw new RangeError('waitSeconds is an integer from 0 to 30');
  return wait;
}

/**
 * A client of mcp-connect's /v1 API for one tenant (the API key, or the workload token,
 * decides which). It holds no per-call state; share one instance.
 */
export class ConnectClient {
  readonly #base: URL;
  /** The API key, or the token source read as each request leaves. */
  readonly #key: ApiKey | TokenSource;
  readonly #retry: RetryPolicy;
  readonly #timeoutMs: number;
  readonly #fetch: typeof fetch;

  constructor(options: ConnectClientOptions) {
    // An unset variable handed in as it is (plain JS, or `process.env.X!`): named, not
    // "Invalid URL" or "ApiKey needs a non-empty string".
    if (isMissing(options.baseUrl)) throw new MissingSettingError('MCP_CONNECT_URL');
    // For untyped callers: the type already says exactly one.
    const { apiKey, token } = options as { apiKey?: unknown; token?: unknown };
    if (apiKey !== undefined && token !== undefined) throw new TypeError('give the API key (apiKey) or a token source (token), not both');
    if (token === undefined && isMissing(apiKey)) throw new MissingSettingError('MCP_CONNECT_API_KEY');
    if (token !== undefined && !(token instanceof TokenFile) && typeof token !== 'function') {
      throw new TypeError('token is a TokenFile, or a function returning the workload token');
    }
    const base = new URL(String(options.baseUrl));
    if (base.protocol !== 'http:' && base.protocol !== 'https:') {
      throw new TypeError('the mcp-connect base URL must be an http(s) URL');
    }
    if (base.username || base.password) throw new TypeError('the mcp-connect base URL must not carry credentials');
    base.search = '';
    base.hash = '';
    if (!base.pathname.endsWith('/')) base.pathname += '/';
    this.#base = base;
    this.#key = options.token ?? (options.apiKey instanceof ApiKey ? options.apiKey : new ApiKey(options.apiKey));
    this.#retry = { ...DEFAULT_RETRY, ...options.retry };
    this.#timeoutMs = options.timeoutMs ?? 15_000;
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  /**
   * A client for `MCP_CONNECT_URL` with `MCP_CONNECT_API_KEY` (the names `mcp-connect dev`
   * writes), or, where no key is set, with a TokenFile of `MCP_CONNECT_TOKEN_FILE` (a
   * workload token's file); a missing one throws `MissingSettingError` naming it (the key,
   * whose message names the token file too, when neither is set).
   */
  static fromEnv(env: Environment = process.env, options: Omit<ConnectClientBaseOptions, 'baseUrl'> = {}): ConnectClient {
    const baseUrl = setting('MCP_CONNECT_URL', env);
    const credential = keyOrTokenFile(env);
    if ('apiKey' in credential) return new ConnectClient({ ...options, baseUrl, apiKey: credential.apiKey });
    return new ConnectClient({ ...options, baseUrl, token: new TokenFile(credential.tokenFile) });
  }

  /** `POST /v1/token`: the token, an elicitation to send, or "declined". */
  async token(req: TokenRequest, options: { signal?: AbortSignal } = {}): Promise<TokenOutcome> {
    const wait = checkWait(req.waitSeconds);
    if (wait !== undefined && req.elicitationId === undefined) {
      throw new TypeError('waitSeconds needs an elicitationId: a first call has nothing to wait for');
    }
    // mcp-connect would answer 400 invalid_request: said here, naming the field.
    if (req.serverName !== undefined && !isServerName(req.serverName)) {
      throw new TypeError('serverName is 1 to 64 characters, none a control or invisible formatting character');
    }
    const body: TokenBodyWire = { subject: req.subject, provider: req.provider };
    if (req.subjectToken !== undefined) body.subject_token = req.subjectToken.reveal();
    if (req.scopes !== undefined) body.scopes = req.scopes;
    if (req.elicitationId !== undefined) body.elicitation_id = req.elicitationId;
    if (wait !== undefined) body.wait_seconds = wait;
    if (req.mcpSessionId !== undefined) body.mcp_session_id = req.mcpSessionId;
    if (req.serverName !== undefined) body.server_name = req.serverName;
    const answer = await this.#send('POST', ['v1', 'token'], { body, waitSeconds: wait, signal: options.signal });
    return this.#parse(() => parseTokenAnswer(answer));
  }

  /** `GET /v1/elicitations/{id}`; with `waitSeconds`, held while it is still pending. */
  async elicitation(id: string, options: { waitSeconds?: number; signal?: AbortSignal } = {}): Promise<ElicitationInfo> {
    const wait = checkWait(options.waitSeconds);
    const query = wait === undefined ? undefined : `wait_seconds=${wait}`;
    const answer = await this.#send('GET', ['v1', 'elicitations', this.#id(id)], { query, waitSeconds: wait, signal: options.signal });
    return this.#parse(() => parseElicitation(answer));
  }

  /**
   * `POST /v1/elicitations/{id}/cancel`: the MCP client answered the URL elicitation with
   * `cancel` or `decline`, so the link must stop working. Harmless to repeat.
   */
  async cancelElicitation(id: string, reason: CancelReason, options: { signal?: AbortSignal } = {}): Promise<CancelledInfo> {
    // For untyped callers: the type already says so.
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition
    if (reason !== 'cancel' && reason !== 'decline') throw new TypeError('reason is cancel or decline');
    const answer = await this.#send('POST', ['v1', 'elicitations', this.#id(id), 'cancel'], { body: { reason }, signal: options.signal });
    return this.#parse(() => parseCancelled(answer));
  }

  /**
   * A `fetch` to `provider`'s API through mcp-connect's proxy (`/v1/proxy/{provider}/…`), as
   * the user `subject` (or whom `subjectToken` proves): mcp-connect attaches the user's
   * credential, which this process never holds. Its input is a path (`'/user?x=1'`, against
   * the provider's API origin) or a URL under `<mcp-connect>/v1/proxy/<provider>/` (for a
   * library with a base URL); another host, a `//…` start, a dot segment, a backslash or an
   * empty segment is refused with TypeError before anything is sent.
   *
   * The caller's method, headers and body go along (a streamed body too, `duplex: 'half'`
   * added), but `authorization`, which is the server key, and `MCP-Connect-*`, which are
   * these options'. The provider's answer is returned as it is, streamed: any status (a
   * provider's 401 too), a redirect unfollowed. The proxy's own answers (`MCP-Connect-Error`)
   * reject: ConnectRequiredError (428), UnavailableError (503/429), ApiError (the others),
   * each with the proxy's code; none is sent again. No timeout but the caller's `signal`:
   * mcp-connect bounds its wait for the provider (`upstream_timeout`).
   */
  proxyFetch(options: ProxyOptions): ProxyFetch {
    const { provider, subject, subjectToken, scopes, elicitationId, serverName, origin } = options;
    if (typeof provider !== 'string' || !PROVIDER_ID.test(provider)) {
      throw new TypeError("provider is a provider's id in mcp-connect: 1 to 64 characters of a-z, 0-9, '-' or '_'");
    }
    if (subject === undefined && subjectToken === undefined) throw new TypeError('proxyFetch needs the subject, or the subjectToken that proves it');
    const ask: Record<string, string> = {};
    if (subject !== undefined) ask['mcp-connect-subject'] = headerText(subject, 'subject');
    if (scopes !== undefined) {
      if (!scopes.every((scope) => typeof scope === 'string' && /^[\x21-\x7e]+$/.test(scope))) {
        throw new TypeError('each scope is printable ASCII without white space');
      }
      ask['mcp-connect-scopes'] = scopes.map((scope) => scope.replaceAll('%', '%25')).join(' ');
    }
    if (elicitationId !== undefined) ask['mcp-connect-elicitation-id'] = this.#id(elicitationId);
    if (serverName !== undefined) {
      if (!isServerName(serverName)) throw new TypeError('serverName is 1 to 64 characters, none a control or invisible formatting character');
      ask['mcp-connect-server-name'] = headerText(serverName, 'serverName');
    }
    if (origin !== undefined) ask['mcp-connect-origin'] = proxyOrigin(origin);
    // Our own path, as this URL serialises it: what an absolute input must start with.
    const prefix = new URL(`v1/proxy/${provider}`, this.#base);
    const label = `ProxyFetch(${this.#base.origin}, ${provider})`;
    const proxied: ProxyFetch = async (input, init) => {
      const target = new URL(`${prefix.href}${proxiedPath(this.#underProxy(prefix, provider, input))}`);
      // What fetch will send, parsed as it parses: still this provider's proxy path.
      if (target.origin !== prefix.origin || !target.pathname.startsWith(`${prefix.pathname}/`)) {
        throw new TypeError('the proxied path is refused: it leaves the proxy');
      }
      let request: ProxiedInit;
      if (input instanceof Request) {
        // fetch's own merge of a Request and init; then only what goes on.
        const r = new Request(input, init?.body != null ? ({ ...init, duplex: 'half' } as ProxiedInit) : init);
        request = { method: r.method, headers: r.headers, body: r.body, signal: r.signal, ...(r.body !== null && { duplex: 'half' }) };
      } else {
        request = { ...init, ...(init?.body != null && { duplex: 'half' }) };
      }
      const headers = new Headers(request.headers);
      const theirs: string[] = [];
      headers.forEach((_value, name) => {
        if (name.startsWith('mcp-connect-')) theirs.push(name);
      });
      for (const name of theirs) headers.delete(name);
      for (const [name, value] of Object.entries(ask)) headers.set(name, value);
      if (subjectToken !== undefined) headers.set('mcp-connect-subject-token', subjectToken.reveal());
      // A token source's token as it is now (a rotated one from the next request on).
      headers.set('authorization', `Bearer ${await this.#bearer()}`);
      let resp: Response;
      try {
        // Never follow: the provider's redirect is the caller's to see, and following it
        // would carry the subject token (and, to mcp-connect's origin, the key) along.
        resp = await this.#fetch(target, { ...request, headers, redirect: 'manual' });
      } catch (e) {
        if (request.signal?.aborted) throw e; // the caller's abort, as fetch reports it
        throw new TransportError("request to mcp-connect's proxy failed", e);
      }
      const code = resp.headers.get(PROXY_ERROR);
      if (code === null) return resp;
      throw await this.#proxyError(resp, code, provider);
    };
    Object.defineProperties(proxied, {
      toString: { value: () => label },
      toJSON: { value: () => label },
      [inspect.custom]: { value: () => label },
    });
    return proxied;
  }

  toString(): string {
    return `ConnectClient(${this.#base.origin})`;
  }

  toJSON(): string {
    return this.toString();
  }

  [inspect.custom](): string {
    return this.toString();
  }

  /** The bearer for the next request: the API key, or the token source's current token. */
  async #bearer(): Promise<string> {
    const key = this.#key;
    if (key instanceof ApiKey) return key.reveal();
    if (key instanceof TokenFile) return (await key.read()).reveal();
    const what = 'the token function';
    let value: unknown;
    try {
      value = await key();
    } catch (e) {
      if (e instanceof WorkloadTokenError) throw e;
      throw new WorkloadTokenError(`${what} threw ${e instanceof Error ? e.name : typeof e}`, e);
    }
    if (value instanceof Secret) value = value.reveal();
    if (typeof value !== 'string') throw new WorkloadTokenError(`${what} returned ${value === null ? 'null' : typeof value}, not the token (a string)`);
    return checkedToken(value, what, `${what} returned an empty token`).reveal();
  }

  #id(id: string): string {
    if (!isElicitationId(id)) throw new TypeError('not an elicitation id');
    return id;
  }

  /**
   * What follows `<mcp-connect>/v1/proxy/<provider>` in `input`: `input` itself if it is a
   * path, else the rest of a URL under it, as written (a parser has not resolved it yet).
   */
  #underProxy(prefix: URL, provider: string, input: string | URL | Request): string {
    const raw = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    if (raw.startsWith('/') && !raw.startsWith('//')) return raw;
    const refused = (what: string) =>
      new TypeError(`${what}: proxyFetch(${provider}) takes a path ('/user') or a URL under ${prefix.href}/ (the server key and the user's token go nowhere else)`);
    if (raw.startsWith('//')) throw refused("'//' names another host");
    const authority = /^[a-z][a-z\d+.-]*:\/\/[^/?#\\]*/iu.exec(raw)?.[0];
    if (authority === undefined || !URL.canParse(raw)) throw refused('not a path or an http(s) URL');
    const url = new URL(raw);
    if (url.origin !== prefix.origin || url.username !== '' || url.password !== '') throw refused(`${url.origin} is not mcp-connect`);
    const rest = raw.slice(authority.length);
    if (!rest.startsWith(`${prefix.pathname}/`)) throw refused("not this provider's proxy");
    return rest.slice(prefix.pathname.length);
  }

  /** The error a proxy's own answer (`MCP-Connect-Error: code`) is. */
  async #proxyError(resp: Response, code: string, provider: string): Promise<ConnectError> {
    let body: Uint8Array;
    try {
      body = await readBounded(resp);
    } catch (e) {
      return e instanceof ConnectError ? e : new TransportError("the answer of mcp-connect's proxy broke off", e);
    }
    const { description } = errorBody(body, resp.status);
    if (resp.status === 428 && code === 'connect_required') {
      let outcome: TokenOutcome;
      try {
        outcome = this.#parse(() => parseTokenAnswer(json(body)));
      } catch (e) {
        if (e instanceof ConnectError) return e;
        throw e;
      }
      if (outcome.status !== 'connect_required') return new InvalidResponseError('a 428 connect_required without its elicitation');
      return new ConnectRequiredError(provider, outcome, description);
    }
    if (resp.status === 503 || resp.status === 429) return new UnavailableError(code, retryAfterMs(resp.headers));
    return new ApiError(resp.status, code, description);
  }

  #parse<T>(f: () => T): T {
    try {
      return f();
    } catch (e) {
      if (e instanceof ShapeError) throw new InvalidResponseError(e.message);
      throw e;
    }
  }

  /** Sends, retrying 503/429 within the policy; returns the parsed JSON of a 200. */
  async #send(
    method: 'GET' | 'POST',
    segments: string[],
    opts: { body?: unknown; query?: string | undefined; waitSeconds?: number | undefined; signal?: AbortSignal | undefined },
  ): Promise<unknown> {
    const url = new URL(segments.map(encodeURIComponent).join('/'), this.#base);
    if (opts.query) url.search = opts.query;
    // The server may hold the answer for the wait; the timeout must outlast it.
    const timeoutMs = this.#timeoutMs + (opts.waitSeconds ?? 0) * 1000;
    let waited = 0;
    for (let attempt = 0; ; attempt++) {
      // Read for each attempt: a token source's rotated token goes with the next one.
      const bearer = await this.#bearer();
      const signals = [AbortSignal.timeout(timeoutMs), ...(opts.signal ? [opts.signal] : [])];
      const headers: Record<string, string> = { authorization: `Bearer ${bearer}`, accept: 'application/json' };
      if (opts.body !== undefined) headers['content-type'] = 'application/json';
      let resp: Response;
      let body: Uint8Array;
      try {
        resp = await this.#fetch(url, {
          method,
          headers,
          body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
          // Never follow: a redirect would carry the API key to wherever it points.
          redirect: 'error',
          signal: AbortSignal.any(signals),
        });
        body = await readBounded(resp);
      } catch (e) {
        if (e instanceof ConnectError) throw e;
        const timedOut = e instanceof Error && (e.name === 'TimeoutError' || e.name === 'AbortError');
        throw new TransportError(timedOut ? 'request to mcp-connect timed out or was aborted' : 'request to mcp-connect failed', e);
      }
      if (resp.status === 200) {
        const v = json(body);
        if (v === undefined) throw new InvalidResponseError('the answer is not JSON');
        return v;
      }
      const { code, description } = errorBody(body, resp.status);
      if (resp.status !== 503 && resp.status !== 429) throw new ApiError(resp.status, code, description);
      const after = retryAfterMs(resp.headers);
      const delay = after ?? this.#retry.defaultDelayMs;
      const within = attempt < this.#retry.maxRetries && delay <= this.#retry.maxDelayMs && waited + delay <= this.#retry.maxTotalMs;
      if (!within) throw new UnavailableError(code, after);
      await sleep(delay);
      waited += delay;
    }
  }
}
