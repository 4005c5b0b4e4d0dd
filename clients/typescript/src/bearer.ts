// MCP authorization, resource-server side, for `@modelcontextprotocol/server` 2.x: the
// counterpart of the Python SDK's `JwtVerifier` (clients/python/src/mcp_connect/auth.py),
// with the same checks. It validates the IdP's JWT access tokens (RFC 9068): an RS256,
// PS256 or ES256 signature against the JWKS named by the issuer's discovery document,
// `typ` `at+jwt` (RFC 9068 §4), `iss`, `aud` = this server's resource, `exp` (and `nbf`),
// and a non-empty `sub`. A refusal is the SDK's OAuthError invalid_token, which its bearer
// middleware answers with 401 and the RFC 9728 metadata pointer.
//
//   const auth = await bearerAuth({ issuer, resource });
//   // in the fetch handler:
//   const doc = auth.metadataResponse(request); if (doc) return doc;
//   const info = await auth.authenticate(request);
//   if (info instanceof Response) return info;
//   return handler.fetch(request, { authInfo: info });
//
// The subject of an MCP call is the token's `sub`, and only that. Why a token was refused
// goes to the log, never to the client; the token itself goes nowhere.
//
// jose does the signature and the registered claims. By hand, as the Python verifier: the
// header checks before any key is looked up (algorithm, typ, kid), the JWKS cache with its
// throttled refetch that keeps the old keys when the IdP is down, and the discovery.

import { type JWK, decodeProtectedHeader, errors, jwtVerify } from 'jose';
import { type AuthInfo, OAuthError, OAuthErrorCode, type OAuthProtectedResourceMetadata, requireBearerAuth } from '@modelcontextprotocol/server';
import type { Logger } from './gate.js';

/**
 * The asymmetric algorithms IdPs sign access tokens with; never `none` or HMAC (an HMAC
 * "signed" with the public key would otherwise verify).
 */
const ALGORITHMS: readonly string[] = ['RS256', 'PS256', 'ES256'];
/** The key types those algorithms use: a JWKS key of another type is left out. */
const KEY_TYPES: readonly string[] = ['RSA', 'EC'];
/**
 * A kid the cached JWKS lacks triggers a refetch at most this often, in seconds (key
 * rotation without letting garbage tokens hammer the IdP).
 */
const JWKS_REFRESH_MIN = 30;
/**
 * Keys older than this are fetched again before use, in seconds: a key the IdP pulled (a
 * compromised one) stops verifying within this time, even with its kid still cached.
 */
const JWKS_MAX_AGE = 600;
/** While the IdP cannot be reached, the keys held still serve this long past their age. */
const JWKS_GRACE = 3600;
/** Clock skew allowed on exp, nbf and iat, in seconds. */
const LEEWAY = 30;
const MAX_DOCUMENT = 256 * 1024;
const TIMEOUT_MS = 10_000;

/** What the client is told (the reason is logged instead). */
const INVALID = 'The access token is not valid for this server';

export interface JwtVerifierOptions {
  /** The fetch the discovery document and the JWKS are read with (default: the global one). */
  fetch?: typeof fetch;
  /** Each read times out after this long (default 10 s). */
  timeoutMs?: number;
  /** Where the reason of each refusal goes (default: console.warn). Never the token. */
  logger?: Logger;
  /** For tests: the wall clock the tokens' times are checked against, in Unix seconds. */
  now?: () => number;
  /**
   * For tests: the clock the JWKS's age and refetch throttle run on, in seconds (default:
   * `performance.now()`, which a wall clock stepping back does not move).
   */
  monotonic?: () => number;
}

/** A refusal, with the reason the log gets. */
class Refusal extends Error {}

/** A document that could not be read: its URL and what went wrong, never a body. */
class DocumentError extends Error {}

async function getJson(fetchFn: typeof fetch, url: string, timeoutMs: number): Promise<unknown> {
  const r = await fetchFn(url, { redirect: 'error', signal: AbortSignal.timeout(timeoutMs), headers: { accept: 'application/json' } });
  if (r.status !== 200) {
    await r.body?.cancel();
    throw new DocumentError(`${url} answered ${r.status}`);
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  if (r.body !== null) {
    const reader = r.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.length;
      if (size > MAX_DOCUMENT) {
        await reader.cancel();
        throw new DocumentError(`${url} answered more than ${MAX_DOCUMENT} bytes`);
      }
      chunks.push(value);
    }
  }
  try {
    return JSON.parse(new TextDecoder().decode(Buffer.concat(chunks)));
  } catch {
    throw new DocumentError(`${url} answered something that is not JSON`);
  }
}

/** A signing key of the JWKS, with the `alg` it was published for (if any). */
interface Key {
  jwk: JWK;
  alg: unknown;
}

/**
 * The JWKS's signing keys by kid. Keys no accepted algorithm can use (other types,
 * encryption keys) and keys without a kid are left out.
 */
function keysOf(jwks: unknown): Map<string, Key> {
  const keys = new Map<string, Key>();
  const list: unknown = typeof jwks === 'object' && jwks !== null ? (jwks as { keys?: unknown }).keys : undefined;
  for (const data of Array.isArray(list) ? (list as unknown[]) : []) {
    if (typeof data !== 'object' || data === null) continue;
    const jwk = data as JWK & Record<string, unknown>;
    if ((jwk.use ?? 'sig') !== 'sig' || typeof jwk.kid !== 'string' || typeof jwk.kty !== 'string' || !KEY_TYPES.includes(jwk.kty)) continue;
    keys.set(jwk.kid, { jwk, alg: jwk.alg });
  }
  return keys;
}

/** ASCII only, then ASCII case-insensitively: a media type comparison (RFC 9068 §4). */
function isAccessTokenType(typ: string): boolean {
  // eslint-disable-next-line no-control-regex -- the ASCII range, control characters included
  return /^[\x00-\x7f]*$/.test(typ) && ['at+jwt', 'application/at+jwt'].includes(typ.toLowerCase());
}

/** A header or document value as the log shows it (JSON, `none` when absent). */
function shown(value: unknown): string {
  const text = value === undefined ? 'none' : JSON.stringify(value);
  // A header value is the caller's: never a whole one into the log.
  return text.length > 64 ? `${text.slice(0, 64)}…` : text;
}

/** https, or http on a loopback host (a development IdP). */
function secureOrLoopback(url: string): boolean {
  if (!URL.canParse(url)) return false;
  const u = new URL(url);
  return u.protocol === 'https:' || (u.protocol === 'http:' && ['127.0.0.1', '[::1]', 'localhost'].includes(u.hostname));
}

/** Why jose refused: its message (which names the claim, never a value or the token). */
function reasonOf(e: unknown): string {
  if (e instanceof Refusal || e instanceof errors.JOSEError) return e.message;
  return e instanceof Error ? e.name : 'unknown error';
}

/**
 * Validates access tokens of one issuer for one audience: `verifyAccessToken` is the
 * OAuthTokenVerifier of `@modelcontextprotocol/server` (for `requireBearerAuth`). Build it
 * with `await JwtVerifier.discover(issuer, resource)`.
 */
export class JwtVerifier {
  readonly issuer: string;
  readonly audience: string;
  readonly #jwksUri: string;
  #keys: Map<string, Key>;
  /** When the JWKS was last fetched (or tried), in Unix seconds. */
  #fetched: number;
  /** When the keys held were fetched, in Unix seconds. */
  #loaded: number;
  /** The refetch under way, which concurrent unknown kids wait for instead of starting one. */
  #refreshing: Promise<void> | undefined;
  readonly #fetch: typeof fetch;
  readonly #timeoutMs: number;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #monotonic: () => number;
  readonly #resource: URL | undefined;

  private constructor(issuer: string, audience: string, jwksUri: string, jwks: unknown, options: JwtVerifierOptions) {
    this.issuer = issuer;
    this.audience = audience;
    this.#jwksUri = jwksUri;
    this.#keys = keysOf(jwks);
    this.#fetch = options.fetch ?? fetch;
    this.#timeoutMs = options.timeoutMs ?? TIMEOUT_MS;
    this.#log = options.logger ?? { warn: (m) => console.warn(`mcp-connect: ${m}`) };
    this.#now = options.now ?? (() => Date.now() / 1000);
    this.#monotonic = options.monotonic ?? (() => performance.now() / 1000);
    this.#fetched = this.#monotonic();
    this.#loaded = this.#fetched;
    this.#resource = URL.canParse(audience) ? new URL(audience) : undefined;
  }

  /**
   * Reads `<issuer>/.well-known/openid-configuration` and its JWKS (no redirects, 10 s,
   * 256 KiB at most each). The document must name the same issuer (RFC 8414 §3.3) and a
   * jwks_uri; otherwise this throws.
   */
  static async discover(issuer: string, audience: string, options: JwtVerifierOptions = {}): Promise<JwtVerifier> {
    const fetchFn = options.fetch ?? fetch;
    const timeoutMs = options.timeoutMs ?? TIMEOUT_MS;
    // Keys read over plain http could be anyone's on the way.
    if (!secureOrLoopback(issuer)) throw new Error(`the issuer ${JSON.stringify(issuer)} must be https (http only on loopback)`);
    const doc = (await getJson(fetchFn, `${issuer.replace(/\/+$/, '')}/.well-known/openid-configuration`, timeoutMs)) as Record<string, unknown> | null;
    const named = typeof doc === 'object' && doc !== null ? doc.issuer : undefined;
    if (named !== issuer) throw new Error(`discovery names issuer ${shown(named)}, expected ${JSON.stringify(issuer)}`);
    const jwksUri = doc?.jwks_uri;
    if (typeof jwksUri !== 'string') throw new Error('the discovery document has no jwks_uri');
    if (!secureOrLoopback(jwksUri)) throw new Error(`the jwks_uri ${shown(jwksUri)} must be https (http only on loopback)`);
    return new JwtVerifier(issuer, audience, jwksUri, await getJson(fetchFn, jwksUri, timeoutMs), options);
  }

  /**
   * The token's AuthInfo (`extra.sub` the subject), or an OAuthError invalid_token, whose
   * reason is logged; it never throws anything else (a JWKS that cannot be fetched
   * refuses the token: 401, not 500).
   */
  async verifyAccessToken(token: string): Promise<AuthInfo> {
    try {
      return await this.#verify(token);
    } catch (e) {
      this.#log.warn(`access token refused: ${reasonOf(e)}`);
      throw new OAuthError(OAuthErrorCode.InvalidToken, INVALID);
    }
  }

  async #verify(token: string): Promise<AuthInfo> {
    const header = decodeProtectedHeader(token) as Record<string, unknown>;
    const alg = header.alg;
    if (typeof alg !== 'string' || !ALGORITHMS.includes(alg)) throw new Refusal(`algorithm ${shown(alg)} is not accepted`);
    // RFC 9068 §4: an access token says so (`at+jwt`, or its full media type, compared as
    // media types are: ASCII case-insensitively). An ID token or any other JWT of the IdP
    // is refused, whatever its audience. The same check as the service's.
    const typ = header.typ;
    if (typ === undefined || typ === null) throw new Refusal('no typ');
    if (typeof typ !== 'string' || !isAccessTokenType(typ)) throw new Refusal('typ is not at+jwt');
    const kid = header.kid;
    if (typeof kid !== 'string') throw new Refusal('no kid');
    const key = await this.#key(kid);
    // A key published for one algorithm is used with that one only.
    if (key.alg !== undefined && key.alg !== alg) throw new Refusal("the token's alg is not its key's");
    const { payload } = await jwtVerify(token, key.jwk, {
      algorithms: [alg],
      issuer: this.issuer,
      audience: this.audience,
      clockTolerance: LEEWAY,
      currentDate: new Date(this.#now() * 1000),
      requiredClaims: ['exp', 'iss', 'aud', 'sub'],
    });
    // jose checks iat only against a maxTokenAge; a token issued in the future is not valid yet.
    if (payload.iat !== undefined && payload.iat > this.#now() + LEEWAY) throw new Refusal('"iat" claim timestamp check failed (in the future)');
    const sub = payload.sub;
    if (typeof sub !== 'string' || sub === '') throw new Refusal('empty sub');
    const clientId: unknown = payload.client_id ?? payload.azp;
    const scope: unknown = payload.scope;
    return {
      token,
      clientId: typeof clientId === 'string' ? clientId : '',
      scopes: typeof scope === 'string' ? scope.split(' ').filter((s) => s !== '') : [],
      expiresAt: payload.exp as number, // required above
      ...(this.#resource !== undefined && { resource: this.#resource }),
      extra: { sub, iss: payload.iss },
    };
  }

  /**
   * The key of `kid`. An unknown kid, or keys older than 10 minutes, fetch the JWKS again
   * (at most every 30 s); while the IdP cannot be reached, the keys held serve an hour
   * past their age.
   */
  async #key(kid: string): Promise<Key> {
    if (!this.#keys.has(kid) || this.#monotonic() - this.#loaded >= JWKS_MAX_AGE) {
      try {
        await this.#refetch();
      } catch (e) {
        if (!this.#keys.has(kid) || this.#monotonic() - this.#loaded >= JWKS_MAX_AGE + JWKS_GRACE) throw e;
        this.#log.warn(`the JWKS is ${Math.round(this.#monotonic() - this.#loaded)} s old and could not be fetched again: ${reasonOf(e)}`);
      }
    }
    const key = this.#keys.get(kid);
    if (key === undefined) throw new Refusal('no key with that kid');
    return key;
  }

  /** One refetch at a time, at most every 30 s (concurrent callers wait for the one under way). */
  async #refetch(): Promise<void> {
    if (this.#refreshing !== undefined) return this.#refreshing;
    if (this.#monotonic() - this.#fetched < JWKS_REFRESH_MIN) return;
    this.#fetched = this.#monotonic();
    this.#refreshing = this.#refresh().finally(() => {
      this.#refreshing = undefined;
    });
    return this.#refreshing;
  }

  /** Replaces the keys with the IdP's current ones; on failure the old ones stay. */
  async #refresh(): Promise<void> {
    let jwks: unknown;
    try {
      jwks = await getJson(this.#fetch, this.#jwksUri, this.#timeoutMs);
    } catch (e) {
      // The IdP is down or unreachable. Only the error's kind is logged (or what our own
      // reader says): a fetch error's text may quote the request.
      throw new Refusal(`the JWKS could not be fetched (${e instanceof DocumentError ? e.message : e instanceof Error ? e.name : 'unknown error'})`);
    }
    const keys = keysOf(jwks);
    // An empty or broken set would refuse every token: the keys held stay.
    if (keys.size === 0) throw new Refusal('the JWKS could not be fetched (it has no usable key)');
    this.#keys = keys;
    this.#loaded = this.#monotonic();
  }
}

export interface BearerAuthOptions extends JwtVerifierOptions {
  /** The IdP whose access tokens are accepted (its discovery document is read at once). */
  issuer: string;
  /** This server's resource identifier (its MCP URL): the `aud` the tokens must carry. */
  resource: string;
  /**
   * The RFC 9728 metadata URL named in each 401 (default: the well-known URL of RFC 9728
   * §3.1, `/.well-known/oauth-protected-resource` inserted before the resource's path).
   */
  resourceMetadataUrl?: string;
  /** Scopes each token must carry; without them, 403 insufficient_scope. */
  requiredScopes?: string[];
}

export interface BearerAuth {
  readonly verifier: JwtVerifier;
  /** The RFC 9728 document: resource, authorization_servers [issuer], bearer_methods_supported ['header']. */
  readonly metadata: OAuthProtectedResourceMetadata;
  readonly resourceMetadataUrl: string;
  /**
   * The request's AuthInfo (`extra.sub` the subject), or the Response to answer: 401
   * with `WWW-Authenticate: Bearer error="invalid_token", ..., resource_metadata="..."`.
   */
  authenticate(request: Request): Promise<AuthInfo | Response>;
  /**
   * The metadata document for a request to one of its paths (`/.well-known/oauth-protected-resource`,
   * the same followed by the resource's path, and resourceMetadataUrl's path); `undefined`
   * for any other path.
   */
  metadataResponse(request: Request): Response | undefined;
}

/** The well-known URL of RFC 9728 §3.1 for `resource` (its path after the inserted segment). */
function wellKnownOf(resource: URL): string {
  const path = resource.pathname.replace(/\/+$/, '');
  return `${resource.origin}/.well-known/oauth-protected-resource${path}`;
}

/**
 * The bearer check of an MCP server on `@modelcontextprotocol/server` 2.x: a JwtVerifier
 * of `issuer`'s tokens for `resource` (discovered now), behind the SDK's
 * `requireBearerAuth`, and the RFC 9728 metadata document it points clients to.
 */
export async function bearerAuth(options: BearerAuthOptions): Promise<BearerAuth> {
  const resource = new URL(options.resource);
  const verifier = await JwtVerifier.discover(options.issuer, options.resource, options);
  const resourceMetadataUrl = options.resourceMetadataUrl ?? wellKnownOf(resource);
  const metadata: OAuthProtectedResourceMetadata = {
    resource: options.resource,
    authorization_servers: [options.issuer],
    bearer_methods_supported: ['header'],
  };
  const paths = new Set(['/.well-known/oauth-protected-resource', new URL(wellKnownOf(resource)).pathname, new URL(resourceMetadataUrl).pathname]);
  const authenticate = requireBearerAuth({
    verifier,
    expectedResource: resource,
    resourceMetadataUrl,
    ...(options.requiredScopes !== undefined && { requiredScopes: options.requiredScopes }),
  });
  return {
    verifier,
    metadata,
    resourceMetadataUrl,
    authenticate,
    metadataResponse(request) {
      if (!paths.has(new URL(request.url).pathname)) return undefined;
      if (request.method !== 'GET' && request.method !== 'HEAD') return new Response(null, { status: 405, headers: { allow: 'GET, HEAD' } });
      // A public document: any origin may read it.
      return Response.json(metadata, { headers: { 'access-control-allow-origin': '*' } });
    },
  };
}
