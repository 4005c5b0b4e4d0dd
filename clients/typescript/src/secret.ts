// Secret-holding values. The secret lives in a private field, so enumeration, spreading,
// JSON.stringify and util.inspect never reach it; toString, toJSON and inspect print a
// placeholder. Reading it takes an explicit reveal().

import { inspect } from 'node:util';

const REDACTED = '[REDACTED]';

export class Secret {
  readonly #value: string;

  constructor(value: string) {
    if (typeof value !== 'string' || value.length === 0) {
      throw new TypeError(`${new.target.name} needs a non-empty string`);
    }
    this.#value = value;
  }

  /** The secret itself: pass it to the one place that needs it, nowhere else. */
  reveal(): string {
    return this.#value;
  }

  toString(): string {
    return `${this.constructor.name}(${REDACTED})`;
  }

  toJSON(): string {
    return REDACTED;
  }

  [inspect.custom](): string {
    return this.toString();
  }

  [Symbol.toPrimitive](): string {
    return this.toString();
  }
}

/** A server-scope API key of mcp-connect (`mcpc_<id>_<secret>`). */
export class ApiKey extends Secret {}

/**
 * A workload token presented in the API key's place (a Kubernetes projected service-account
 * token, a GitHub Actions OIDC token, a client-credentials token), as a token source gave it.
 */
export class WorkloadToken extends Secret {}

/** A downstream provider's access token, as `/v1/token` hands it out. */
export class AccessToken extends Secret {}

/** The user's own MCP access token, sent as `subject_token` to prove the subject. */
export class SubjectToken extends Secret {}
