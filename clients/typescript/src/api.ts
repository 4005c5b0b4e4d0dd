// The request and answer shapes of mcp-connect's /v1 API (openapi.json: postToken,
// getElicitation, cancelElicitation). Each wire shape has a TypeScript type and, beside
// it, a runtime description (WIRE) of its fields and their required-ness: the compiler
// checks the two agree (the assertions at the end), and test/drift.test.mjs checks the
// description against openapi.json, so the contract cannot drift unnoticed.

import { AccessToken, SubjectToken } from './secret.js';

/** The stable `error` codes of the API (openapi.json `ErrorCode`). New codes may appear. */
export const ERROR_CODES = [
  'invalid_api_key',
  'insufficient_scope',
  'tenant_disabled',
  'workload_token_invalid',
  'workload_token_algorithm',
  'workload_token_type',
  'workload_token_unknown_key',
  'workload_token_issuer',
  'workload_token_audience',
  'workload_token_expired',
  'workload_token_not_yet_valid',
  'workload_token_lifetime',
  'workload_token_replayed',
  'workload_no_rule',
  'workload_rule_ambiguous',
  'temporarily_unavailable',
  'too_many_attempts',
  'internal_error',
  'invalid_json',
  'unsupported_media_type',
  'payload_too_large',
  'invalid_path',
  'invalid_query',
  'invalid_request',
  'invalid_subject',
  'subject_token_required',
  'subject_token_not_accepted',
  'subject_token_invalid',
  'subject_token_issuer',
  'subject_token_audience',
  'subject_token_expired',
  'subject_token_not_yet_valid',
  'subject_token_subject',
  'unknown_provider',
  'invalid_scope',
  'invalid_elicitation_id',
  'elicitation_not_found',
  'elicitation_mismatch',
  'provider_not_allowed',
  'provider_disabled',
  'provider_unavailable',
  'provider_misconfigured',
  'connect_required',
  'connect_declined',
  'proxy_not_configured',
  'proxy_path_refused',
  'proxy_path_not_allowed',
  'proxy_method_not_allowed',
  'proxy_origin_not_allowed',
  'upstream_unreachable',
  'upstream_refused',
  'upstream_timeout',
  'rate_limited',
  'upstream_too_large',
  'invalid_connection_id',
  'connection_not_found',
  'invalid_cursor',
  'invalid_webhook_id',
  'webhook_not_found',
  'invalid_webhook_url',
  'too_many_webhooks',
  'invalid_tenant_id',
  'tenant_not_found',
  'tenant_exists',
  'too_many_tenants',
  'too_many_providers',
  'tenant_kept_by_file',
  'tenant_ended',
  'tenant_not_under_data_keys',
  'unknown_idp',
  'provider_not_found',
  'provider_exists',
  'provider_kept_by_file',
  'provider_secret_unopenable',
  'not_found',
  'method_not_allowed',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

/** The `status` values of an elicitation (openapi.json `ElicitationStatus`). */
export const ELICITATION_STATUSES = ['pending', 'completed', 'declined', 'expired', 'cancelled'] as const;
export type ElicitationStatus = (typeof ELICITATION_STATUSES)[number];

/**
 * How an MCP server uses a handed-out credential (`credential_type` of a `/v1/token`
 * answer): `oauth2` a bearer token, `api_key` as the provider documents its key, `basic`
 * HTTP Basic with `fields.username` and the token as the password. openapi.json types it
 * `string` (no enum), so a later mcp-connect may add a kind; see `TokenOutcome`.
 */
export type CredentialType = 'oauth2' | 'api_key' | 'basic';

/**
 * What `/v1/token` hands out for a tenant and provider (openapi.json `HandOutMode`):
 * `credentials`, or `none` (the answer says the connection is there, without its
 * credential: the tool calls the provider through `/v1/proxy`).
 */
export const HAND_OUT_MODES = ['credentials', 'none'] as const;

/** The `status` variants of a `/v1/token` answer (openapi.json `TokenAnswer`). */
export const TOKEN_STATUSES = ['connected', 'connect_required', 'declined'] as const;

// --- Wire shapes (snake_case, as sent and received) -----------------------------------

export interface TokenBodyWire {
  subject?: string | null;
  subject_token?: string | null;
  provider: string;
  scopes?: string[] | null;
  elicitation_id?: string | null;
  wait_seconds?: number | null;
  mcp_session_id?: string | null;
  server_name?: string | null;
}
export interface AccountWire {
  id: string;
  login?: string | null;
}
export interface ConnectedWire {
  access_token?: string | null;
  hand_out: string;
  credential_type: string;
  fields?: Record<string, string>;
  token_type: string;
  expires_at?: string | null;
  scopes: string[];
  account?: AccountWire | null;
  connection_id: string;
}
export interface ElicitationLinkWire {
  id: string;
  url: string;
  expires_at: string;
}
export interface McpElicitationWire {
  mode: string;
  message: string;
  url: string;
  elicitationId: string;
}
export interface ConnectRequiredWire {
  elicitation: ElicitationLinkWire;
  mcp: McpElicitationWire;
  provider_name: string;
}
export interface DeclinedWire {
  elicitation_id: string;
  provider_name: string;
}
export interface ElicitationWire {
  id: string;
  status: string;
  subject: string;
  provider: string;
  scopes: string[];
  created_at: string;
  expires_at: string;
  completed_at?: string | null;
  cancel_reason?: string | null;
}
export interface CancelBodyWire {
  reason?: 'cancel' | 'decline' | null;
}
export interface CancelledWire {
  id: string;
  status: string;
  cancel_reason?: string | null;
  provider: string;
  provider_name: string;
}
export interface ErrorBodyWire {
  error: string;
  error_description: string;
}

/**
 * Each shape's fields, `true` where required; keyed by the openapi.json schema name.
 * Required means the contract requires it; the parsers below still take an answer of an
 * older mcp-connect without `provider_name` / `provider` (as `credential_type`) or
 * `hand_out` (as `credentials`, which then needs its `access_token`).
 */
export const WIRE = {
  TokenBody: {
    subject: false,
    subject_token: false,
    provider: true,
    scopes: false,
    elicitation_id: false,
    wait_seconds: false,
    mcp_session_id: false,
    server_name: false,
  },
  Account: { id: true, login: false },
  Connected: {
    access_token: false,
    hand_out: true,
    credential_type: true,
    fields: false,
    token_type: true,
    expires_at: false,
    scopes: true,
    account: false,
    connection_id: true,
  },
  ElicitationLink: { id: true, url: true, expires_at: true },
  McpElicitation: { mode: true, message: true, url: true, elicitationId: true },
  ConnectRequired: { elicitation: true, mcp: true, provider_name: true },
  Declined: { elicitation_id: true, provider_name: true },
  Elicitation: {
    id: true,
    status: true,
    subject: true,
    provider: true,
    scopes: true,
    created_at: true,
    expires_at: true,
    completed_at: false,
    cancel_reason: false,
  },
  CancelBody: { reason: false },
  Cancelled: { id: true, status: true, cancel_reason: false, provider: true, provider_name: true },
  ErrorBody: { error: true, error_description: true },
} as const;

/** The query parameters the client sends, per operation. */
export const QUERY = { getElicitation: ['wait_seconds'] } as const;

// --- What the client hands its caller ------------------------------------------------

/** A `POST /v1/token` request. `subject` is the validated MCP access token's `sub`. */
export interface TokenRequest {
  subject: string;
  /**
   * The validated MCP access token the subject was taken from: mcp-connect checks it
   * (signature, issuer, the tenant's audience, expiry, `sub`). Needed where the tenant sets
   * `require_subject_token`; refused where it has no `subject_token_audience`.
   */
  subjectToken?: SubjectToken;
  provider: string;
  /** Scopes beyond the provider's configured default. */
  scopes?: string[];
  /** On a retried tool call: the elicitation the first round handed out. */
  elicitationId?: string;
  /** With `elicitationId`: hold the answer up to this long (0-30 s) while it is pending. */
  waitSeconds?: number;
  /** The MCP session the call belongs to (kept for the audit trail). */
  mcpSessionId?: string;
  /**
   * The MCP server's human-facing name, which mcp-connect's elicitation message names
   * ("Whoami Tools needs access to your GitHub account. ..."; without it, the tenant's
   * display name). 1 to 64 characters (white space around it aside, which mcp-connect
   * trims), none a control or invisible formatting character; another throws TypeError
   * before anything is sent.
   */
  serverName?: string;
}

export interface Account {
  id: string;
  login: string | null;
}

/** The URL-mode elicitation mcp-connect prepared for the MCP answer. */
export interface McpUrlElicitation {
  mode: 'url';
  message: string;
  url: string;
  elicitationId: string;
}

export type TokenOutcome =
  | {
      status: 'connected';
      /**
       * Redacted in logs and JSON; `token.reveal()` for the provider call. Null where the
       * tenant hands out no credential (`handOut` is `none`): call the provider through
       * the proxy (`ConnectClient.proxyFetch`).
       */
      token: AccessToken | null;
      /**
       * `oauth2` (a bearer token), `api_key` or `basic` (typed on mcp-connect's page). Open
       * (`(string & {})`, as `ElicitationInfo.status`): a kind a later mcp-connect adds
       * arrives as it is, so a tool that switches on it needs a `default` that refuses
       * what it does not know how to present, rather than this client refusing the answer.
       */
      credentialType: CredentialType | (string & {});
      /** `api_key` and `basic`: every field typed, by name, each redacted like `token`. */
      fields: Record<string, AccessToken> | null;
      tokenType: string;
      expiresAt: Date | null;
      scopes: string[];
      account: Account | null;
      connectionId: string;
      /**
       * `credentials` (the token is handed out; also from an mcp-connect that does not say)
       * or `none` (the tenant keeps credentials in mcp-connect: no `token`, no `fields`; the
       * connection is there and the proxy uses it). Open as `credentialType`: a mode a later
       * mcp-connect adds arrives as it is.
       */
      handOut: (typeof HAND_OUT_MODES)[number] | (string & {});
    }
  | {
      status: 'connect_required';
      elicitation: { id: string; url: string; expiresAt: Date };
      mcp: McpUrlElicitation;
      /** The provider's display name (e.g. `GitHub`); null from an mcp-connect that sends none. */
      providerName: string | null;
    }
  | {
      status: 'declined';
      elicitationId: string;
      /** As on `connect_required`. */
      providerName: string | null;
    };

export interface ElicitationInfo {
  id: string;
  /** A status this version does not know arrives as it is. */
  status: ElicitationStatus | (string & {});
  subject: string;
  provider: string;
  scopes: string[];
  createdAt: Date;
  expiresAt: Date;
  completedAt: Date | null;
  cancelReason: string | null;
}

export interface CancelledInfo {
  id: string;
  status: ElicitationStatus | (string & {});
  cancelReason: string | null;
  /** Whose link it was: the provider (id) and its display name; null from an mcp-connect that sends none. */
  provider: string | null;
  providerName: string | null;
}

/** What the MCP client answered to the URL elicitation when it did not accept it. */
export type CancelReason = 'cancel' | 'decline';

/** Elicitation ids are opaque to the client: 1 to 128 visible ASCII characters. */
export function isElicitationId(s: unknown): s is string {
  return typeof s === 'string' && /^[\x21-\x7e]{1,128}$/.test(s);
}

/**
 * A `server_name` mcp-connect takes (its `domain::shown::is_display_name`): after trimming
 * white space, 1 to 64 characters (code points), none it does not show: control
 * characters (Cc), invisible formatting ones (Cf: bidi overrides and isolates, zero-width
 * spaces and joiners, tag characters), line and paragraph separators, and the
 * default-ignorable ones (variation selectors, Hangul fillers, the combining grapheme
 * joiner). A name with one could read differently from what it is, or carry hidden words
 * to a model. mcp-connect trims the name it takes.
 */
export function isServerName(s: unknown): s is string {
  if (typeof s !== 'string') return false;
  const name = s.replace(/^\p{White_Space}+|\p{White_Space}+$/gu, '');
  return /^[\s\S]{1,64}$/u.test(name) && !NOT_SHOWN.test(name);
}
/** The characters above, and a lone surrogate (no JSON text a server takes can hold one). */
const NOT_SHOWN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}\p{Cs}]/u;

// --- Parsing answers (an answer that is not what the API documents is refused) -------

/** Thrown by the parsers below; the client wraps it as InvalidResponseError. */
export class ShapeError extends Error {
  override readonly name = 'ShapeError';
}

type Obj = Record<string, unknown>;

function obj(v: unknown, what: string): Obj {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new ShapeError(`${what} is not an object`);
  return v as Obj;
}
function str(o: Obj, k: string, what: string): string {
  const v = o[k];
  if (typeof v !== 'string') throw new ShapeError(`${what}.${k} is not a string`);
  return v;
}
function optStr(o: Obj, k: string, what: string): string | null {
  return o[k] === undefined || o[k] === null ? null : str(o, k, what);
}
/** The typed credential's fields (absent for OAuth), each wrapped so no log shows it. */
function credentialFields(o: Obj): Record<string, AccessToken> | null {
  if (o.fields === undefined || o.fields === null) return null;
  const f = obj(o.fields, 'answer.fields');
  const out: Record<string, AccessToken> = {};
  for (const k of Object.keys(f)) out[k] = new AccessToken(str(f, k, 'answer.fields'));
  return out;
}
function strings(o: Obj, k: string, what: string): string[] {
  const v = o[k];
  if (!Array.isArray(v) || !v.every((s) => typeof s === 'string')) throw new ShapeError(`${what}.${k} is not a list of strings`);
  return v;
}
function date(o: Obj, k: string, what: string): Date {
  const d = new Date(str(o, k, what));
  if (Number.isNaN(d.getTime())) throw new ShapeError(`${what}.${k} is not a time`);
  return d;
}
function optDate(o: Obj, k: string, what: string): Date | null {
  return o[k] === undefined || o[k] === null ? null : date(o, k, what);
}
function id(o: Obj, k: string, what: string): string {
  const v = str(o, k, what);
  if (!isElicitationId(v)) throw new ShapeError(`${what}.${k} is not an elicitation id`);
  return v;
}

export function parseTokenAnswer(body: unknown): TokenOutcome {
  const o = obj(body, 'answer');
  switch (o.status) {
    case 'connected': {
      const a = o.account === undefined || o.account === null ? null : obj(o.account, 'account');
      const handOut = optStr(o, 'hand_out', 'answer') ?? 'credentials';
      const token = optStr(o, 'access_token', 'answer');
      if (token === null && handOut === 'credentials') throw new ShapeError('answer.access_token is not a string');
      return {
        status: 'connected',
        token: token === null ? null : new AccessToken(token),
        credentialType: optStr(o, 'credential_type', 'answer') ?? 'oauth2',
        fields: credentialFields(o),
        tokenType: str(o, 'token_type', 'answer'),
        expiresAt: optDate(o, 'expires_at', 'answer'),
        scopes: strings(o, 'scopes', 'answer'),
        account: a === null ? null : { id: str(a, 'id', 'account'), login: optStr(a, 'login', 'account') },
        connectionId: str(o, 'connection_id', 'answer'),
        handOut,
      };
    }
    case 'connect_required': {
      const e = obj(o.elicitation, 'elicitation');
      const m = obj(o.mcp, 'mcp');
      if (m.mode !== 'url') throw new ShapeError('mcp.mode is not "url"');
      return {
        status: 'connect_required',
        elicitation: { id: id(e, 'id', 'elicitation'), url: str(e, 'url', 'elicitation'), expiresAt: date(e, 'expires_at', 'elicitation') },
        mcp: { mode: 'url', message: str(m, 'message', 'mcp'), url: str(m, 'url', 'mcp'), elicitationId: id(m, 'elicitationId', 'mcp') },
        providerName: optStr(o, 'provider_name', 'answer'),
      };
    }
    case 'declined':
      return { status: 'declined', elicitationId: id(o, 'elicitation_id', 'answer'), providerName: optStr(o, 'provider_name', 'answer') };
    default:
      throw new ShapeError('answer.status is not one of connected, connect_required, declined');
  }
}

export function parseElicitation(body: unknown): ElicitationInfo {
  const o = obj(body, 'elicitation');
  const w = 'elicitation';
  return {
    id: id(o, 'id', w),
    status: str(o, 'status', w),
    subject: str(o, 'subject', w),
    provider: str(o, 'provider', w),
    scopes: strings(o, 'scopes', w),
    createdAt: date(o, 'created_at', w),
    expiresAt: date(o, 'expires_at', w),
    completedAt: optDate(o, 'completed_at', w),
    cancelReason: optStr(o, 'cancel_reason', w),
  };
}

export function parseCancelled(body: unknown): CancelledInfo {
  const o = obj(body, 'cancelled');
  const w = 'cancelled';
  return {
    id: id(o, 'id', w),
    status: str(o, 'status', w),
    cancelReason: optStr(o, 'cancel_reason', w),
    provider: optStr(o, 'provider', w),
    providerName: optStr(o, 'provider_name', w),
  };
}

// --- The compiler checks that WIRE and the wire types name the same fields -----------

// The usual exact-equality test: T appears once on each side on purpose.
// eslint-disable-next-line @typescript-eslint/no-unnecessary-type-parameters
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
type RequiredKeys<T> = { [K in keyof T]-?: object extends Pick<T, K> ? never : K }[keyof T];
type Described<D> = { all: keyof D; required: { [K in keyof D]: D[K] extends true ? K : never }[keyof D] };
type Agrees<T, D> = Equal<keyof T, Described<D>['all']> extends true ? Equal<RequiredKeys<T>, Described<D>['required']> : false;
type Check<T extends true> = T;
export type WireChecks = [
  Check<Agrees<TokenBodyWire, (typeof WIRE)['TokenBody']>>,
  Check<Agrees<AccountWire, (typeof WIRE)['Account']>>,
  Check<Agrees<ConnectedWire, (typeof WIRE)['Connected']>>,
  Check<Agrees<ElicitationLinkWire, (typeof WIRE)['ElicitationLink']>>,
  Check<Agrees<McpElicitationWire, (typeof WIRE)['McpElicitation']>>,
  Check<Agrees<ConnectRequiredWire, (typeof WIRE)['ConnectRequired']>>,
  Check<Agrees<DeclinedWire, (typeof WIRE)['Declined']>>,
  Check<Agrees<ElicitationWire, (typeof WIRE)['Elicitation']>>,
  Check<Agrees<CancelBodyWire, (typeof WIRE)['CancelBody']>>,
  Check<Agrees<CancelledWire, (typeof WIRE)['Cancelled']>>,
  Check<Agrees<ErrorBodyWire, (typeof WIRE)['ErrorBody']>>,
];
