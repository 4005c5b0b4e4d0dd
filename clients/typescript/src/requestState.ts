// The MCP `requestState` (2026-07-28) passes through the client between the
// `input_required` answer and the retry, so on return it is untrusted input. It is sealed
// with XChaCha20-Poly1305: the plaintext (elicitation id, deadline) is encrypted, and the
// call it belongs to (subject, tool name, digest of the arguments) is the associated data,
// so a state opens only for the same subject making the same tool call with the same
// arguments, under a key only the MCP server holds, before its deadline.
//
// Format `mcs2`, byte for byte the same as the Rust and Python libraries
// (docs/request-state.md, vectors in clients/request-state-vectors.json):
// `mcs2.<kid>.` + base64url(24-byte nonce ‖ ciphertext ‖ tag).

import { xchacha20poly1305 } from '@noble/ciphers/chacha.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { randomBytes } from 'node:crypto';
import { inspect } from 'node:util';
import { canonicalJson } from './jcs.js';
import { isElicitationId } from './api.js';
import { type Environment, MissingSettingError, isMissing, setting } from './settings.js';

const PREFIX = 'mcs2.';
const NONCE_LEN = 24;
const TAG_LEN = 16;
/** Longer states are refused before decoding: ours are about 120 characters. */
const MAX_SEALED_LEN = 2048;
const utf8 = new TextEncoder();
const AD_DOMAIN = utf8.encode('mcp-connect/request-state/v2');
const KID_DOMAIN = utf8.encode('mcp-connect/request-state/v2/key-id');
/** The key id is this many bytes of the hash: 8 characters of base64url. */
const KID_BYTES = 6;
const BASE64URL = /^[A-Za-z0-9_-]*$/;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function b64url(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString('base64url');
}

/**
 * Strict base64url without padding. Buffer's decoder skips characters it does not know
 * and ignores trailing bits, so two texts could open as the same state; a text that does
 * not re-encode to itself is refused instead (as the Rust decoder refuses it).
 */
function unb64url(s: string): Uint8Array | undefined {
  if (!BASE64URL.test(s)) return undefined;
  const bytes = Buffer.from(s, 'base64url');
  return bytes.toString('base64url') === s ? new Uint8Array(bytes) : undefined;
}

class Key {
  readonly kid: string;
  readonly #bytes: Uint8Array;

  constructor(bytes: Uint8Array) {
    this.#bytes = Uint8Array.from(bytes);
    this.kid = b64url(sha256(concat(KID_DOMAIN, this.#bytes)).subarray(0, KID_BYTES));
  }

  cipher(nonce: Uint8Array, ad: Uint8Array) {
    return xchacha20poly1305(this.#bytes, nonce, ad);
  }
}

/** A request-state key that is not 32 bytes of standard base64. */
export class InvalidRequestStateKeyError extends Error {
  override readonly name = 'InvalidRequestStateKeyError';
  constructor() {
    super('a request-state key is 32 bytes, standard base64 encoded');
  }
}

/** @deprecated Renamed `InvalidRequestStateKeyError` (the same class); this name goes in a later release. */
export const InvalidRequestStateKey = InvalidRequestStateKeyError;
/** @deprecated Renamed `InvalidRequestStateKeyError`; this name goes in a later release. */
export type InvalidRequestStateKey = InvalidRequestStateKeyError;

/**
 * The AEAD key(s) for request states: the current one seals, the one a state names by its
 * key id opens it (so a key can rotate without failing the calls in flight). Keep it out
 * of the client's reach. It never prints.
 */
// The keys of each RequestStateKey, out of reach of the class's public surface.
const RINGS = new WeakMap<RequestStateKey, { current: Key; previous: readonly Key[] }>();

function ring(key: RequestStateKey): { current: Key; previous: readonly Key[] } {
  const r = RINGS.get(key);
  if (r === undefined) throw new TypeError('not a RequestStateKey');
  return r;
}

export class RequestStateKey {
  private constructor(current: Key, previous: readonly Key[]) {
    RINGS.set(this, { current, previous });
  }

  static fromBytes(bytes: Uint8Array): RequestStateKey {
    if (!(bytes instanceof Uint8Array) || bytes.length !== 32) throw new InvalidRequestStateKeyError();
    return new RequestStateKey(new Key(bytes), []);
  }

  /** `MCP_STATE_KEY` of `env` (the name `mcp-connect dev` writes); `MissingSettingError` when unset. */
  static fromEnv(env: Environment = process.env): RequestStateKey {
    return RequestStateKey.fromBase64(setting('MCP_STATE_KEY', env));
  }

  /** 32 bytes in standard base64 (e.g. `openssl rand -base64 32`). */
  static fromBase64(text: string): RequestStateKey {
    if (isMissing(text)) throw new MissingSettingError('MCP_STATE_KEY');
    // String(): an untyped caller may hand in something else (a Buffer read from a file).
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-conversion
    const s = String(text).trim();
    if (!BASE64.test(s)) throw new InvalidRequestStateKeyError();
    const bytes = Buffer.from(s, 'base64');
    if (bytes.toString('base64') !== s) throw new InvalidRequestStateKeyError();
    return RequestStateKey.fromBytes(new Uint8Array(bytes));
  }

  /** A fresh random key (a single-instance server that may lose its states on restart). */
  static generate(): RequestStateKey {
    return RequestStateKey.fromBytes(new Uint8Array(randomBytes(32)));
  }

  /** This key, also opening states sealed under the current key of each of `old` (rotation). */
  withPrevious(...old: RequestStateKey[]): RequestStateKey {
    const r = ring(this);
    return new RequestStateKey(r.current, [...r.previous, ...old.map((k) => ring(k).current)]);
  }

  /** The current key's id, as it appears in the states it seals. */
  get keyId(): string {
    return ring(this).current.kid;
  }

  toString(): string {
    return 'RequestStateKey([REDACTED])';
  }

  toJSON(): string {
    return '[REDACTED]';
  }

  [inspect.custom](): string {
    return this.toString();
  }
}

/** The tool call a state belongs to. `subject` comes from the validated MCP access token. */
export interface ToolCall {
  subject: string;
  tool: string;
  /** The arguments as the client sent them; `null`/`undefined` count as `{}`. */
  arguments: unknown;
}

/** What a sealed state carries: the elicitation of the first round and a deadline. */
export interface RequestState {
  elicitationId: string;
  /** Whole Unix seconds. */
  expiresAt: number;
}

/** SHA-256 of the RFC 8785 text of the arguments (throws CanonicalizationError). */
export function argumentsDigest(args: unknown): Uint8Array {
  return sha256(utf8.encode(canonicalJson(args)));
}

function u64(n: number): Uint8Array {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, BigInt(n));
  return b;
}

function associatedData(kid: string, call: ToolCall): Uint8Array {
  const parts = [AD_DOMAIN, utf8.encode(kid), utf8.encode(call.subject), utf8.encode(call.tool), argumentsDigest(call.arguments)];
  // Length-prefixed, so ("ab","c") and ("a","bc") differ.
  return concat(...parts.flatMap((p) => [u64(p.length), p]));
}

function plaintext(state: RequestState): Uint8Array {
  if (!isElicitationId(state.elicitationId)) throw new TypeError('not an elicitation id');
  if (!Number.isSafeInteger(state.expiresAt)) throw new TypeError('expiresAt is whole Unix seconds');
  // Exactly {"e":"<id>","x":<deadline>}: the field order is the wire format.
  return utf8.encode(`{"e":${JSON.stringify(state.elicitationId)},"x":${state.expiresAt}}`);
}

/**
 * Seals `state` for `call` under the key's current key, with a fresh random nonce. Throws
 * CanonicalizationError when the arguments have no RFC 8785 form: ask again without a state.
 */
export function sealRequestState(key: RequestStateKey, call: ToolCall, state: RequestState): string {
  return sealRequestStateWithNonce(key, call, state, new Uint8Array(randomBytes(NONCE_LEN)));
}

/**
 * Seals with a given nonce. For the shared test vectors only: a nonce used twice under
 * one key breaks XChaCha20-Poly1305, so production code calls sealRequestState.
 */
export function sealRequestStateWithNonce(key: RequestStateKey, call: ToolCall, state: RequestState, nonce: Uint8Array): string {
  if (nonce.length !== NONCE_LEN) throw new TypeError(`a nonce is ${NONCE_LEN} bytes`);
  const k = ring(key).current;
  const sealed = k.cipher(nonce, associatedData(k.kid, call)).encrypt(plaintext(state));
  return `${PREFIX}${k.kid}.${b64url(concat(nonce, sealed))}`;
}

/** Why a returned requestState was not accepted. */
export type RequestStateRefusal = 'malformed' | 'invalid' | 'expired';

const MESSAGES: Record<RequestStateRefusal, string> = {
  malformed: 'requestState is malformed',
  // Altered, sealed under another key, or made for another subject, tool or arguments:
  // indistinguishable by design.
  invalid: 'requestState does not belong to this call',
  expired: 'requestState has expired',
};

export class RequestStateError extends Error {
  override readonly name = 'RequestStateError';
  /**
   * With `expired` only: what the state held. It opened under our key for this call, so
   * it is authentic, only too old (a `decline` answering it still closes its link). Not
   * enumerable: logging the error does not print the elicitation id the state hid.
   */
  declare readonly expiredState?: RequestState;

  constructor(
    readonly reason: RequestStateRefusal,
    expiredState?: RequestState,
  ) {
    super(MESSAGES[reason]);
    if (expiredState !== undefined) Object.defineProperty(this, 'expiredState', { value: expiredState, enumerable: false });
  }
}

function parsePlain(bytes: Uint8Array): RequestState | undefined {
  try {
    const v: unknown = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
    if (typeof v !== 'object' || v === null) return undefined;
    const { e, x } = v as { e?: unknown; x?: unknown };
    if (typeof e !== 'string' || !isElicitationId(e) || typeof x !== 'number' || !Number.isSafeInteger(x)) return undefined;
    return { elicitationId: e, expiresAt: x };
  } catch {
    return undefined;
  }
}

/**
 * Opens a state the client returned, for `call`, at `nowSeconds` (Unix seconds, default
 * now). Throws RequestStateError with reason `malformed`, `invalid` or `expired`.
 */
export function openRequestState(sealed: string, key: RequestStateKey, call: ToolCall, nowSeconds = Date.now() / 1000): RequestState {
  if (typeof sealed !== 'string' || sealed.length > MAX_SEALED_LEN || !sealed.startsWith(PREFIX)) {
    throw new RequestStateError('malformed');
  }
  const rest = sealed.slice(PREFIX.length);
  const dot = rest.indexOf('.');
  if (dot < 0) throw new RequestStateError('malformed');
  const kid = rest.slice(0, dot);
  const raw = unb64url(rest.slice(dot + 1));
  if (raw === undefined || raw.length < NONCE_LEN + TAG_LEN) throw new RequestStateError('malformed');
  // A key id we hold no key for looks like any other state that does not open.
  const { current, previous } = ring(key);
  const k = [current, ...previous].find((c) => c.kid === kid);
  if (k === undefined) throw new RequestStateError('invalid');
  let ad: Uint8Array;
  try {
    ad = associatedData(kid, call);
  } catch {
    // Arguments without a canonical form: no state can have been sealed for them.
    throw new RequestStateError('invalid');
  }
  let msg: Uint8Array;
  try {
    msg = k.cipher(raw.subarray(0, NONCE_LEN), ad).decrypt(raw.subarray(NONCE_LEN));
  } catch {
    throw new RequestStateError('invalid');
  }
  // Authenticated, so a parse failure means our own format changed: still refuse.
  const state = parsePlain(msg);
  if (state === undefined) throw new RequestStateError('malformed');
  if (nowSeconds >= state.expiresAt) throw new RequestStateError('expired', state);
  return state;
}
