// The 2025-11-25 session memory: that revision has no requestState, so the elicitation
// handed out with a -32042 is remembered per (session, subject, tool, arguments digest)
// for the call that repeats it (the Rust example's legacy.rs, Python's pending.py).

import { argumentsDigest } from './requestState.js';

/** Entries the 2025-11-25 session memory holds in all. */
export const PENDING_CAPACITY = 10_000;
/** Entries one subject may hold in it (past that, its oldest goes). */
export const PENDING_PER_SUBJECT = 32;

/**
 * 2025-11-25 has no requestState: after a -32042 the client simply repeats the call. The
 * elicitation handed out is remembered per (session, subject, tool, arguments digest) and
 * taken by the next identical call. Bounded and in memory (2025-11-25 sessions live in one
 * instance anyway), twice: `capacity` entries in all (when full even after dropping
 * expired entries, nothing is remembered and the retry starts anew), and `perSubject`
 * entries for one subject (past that, that subject's oldest entry goes). A user varying
 * free-form arguments thus only pushes out their own entries, never another user's.
 */
export class PendingElicitations {
  readonly #map = new Map<string, { id: string; expiresAt: number; subject: string }>();
  /** Each subject's keys, oldest first (a Set keeps insertion order). */
  readonly #bySubject = new Map<string, Set<string>>();
  readonly #capacity: number;
  readonly #perSubject: number;

  constructor(options: { capacity?: number; perSubject?: number } = {}) {
    this.#capacity = options.capacity ?? PENDING_CAPACITY;
    this.#perSubject = options.perSubject ?? PENDING_PER_SUBJECT;
    if (!(this.#capacity >= 1 && this.#perSubject >= 1)) throw new RangeError('capacity and perSubject are at least 1');
  }

  static key(sessionId: string | undefined, subject: string, tool: string, args: unknown): string | undefined {
    try {
      const digest = Buffer.from(argumentsDigest(args)).toString('hex');
      return JSON.stringify([sessionId ?? '', subject, tool, digest]);
    } catch {
      return undefined; // arguments without a canonical form: nothing to reconcile with
    }
  }

  /**
   * Remembers the elicitation handed out for `key` (made by `key()` for `subject`) until
   * `expiresAt`. A subject at its quota loses its oldest entry.
   */
  remember(key: string, id: string, expiresAt: number, now: number, subject: string = PendingElicitations.#subjectOf(key)): void {
    if (this.#map.has(key)) {
      this.#forget(key);
    } else {
      const own = this.#bySubject.get(subject);
      if (own !== undefined && own.size >= this.#perSubject) this.#forget(own.values().next().value as string);
      if (this.#map.size >= this.#capacity) {
        for (const [k, v] of this.#map) if (v.expiresAt <= now) this.#forget(k);
      }
      if (this.#map.size >= this.#capacity) return;
    }
    this.#map.set(key, { id, expiresAt, subject });
    let own = this.#bySubject.get(subject);
    if (own === undefined) this.#bySubject.set(subject, (own = new Set()));
    own.add(key);
  }

  /** The elicitation of an earlier round of this call, if still current; forgets it. */
  take(key: string, now: number): string | undefined {
    const v = this.#forget(key);
    return v !== undefined && v.expiresAt > now ? v.id : undefined;
  }

  get size(): number {
    return this.#map.size;
  }

  #forget(key: string): { id: string; expiresAt: number } | undefined {
    const v = this.#map.get(key);
    if (v === undefined) return undefined;
    this.#map.delete(key);
    const own = this.#bySubject.get(v.subject);
    own?.delete(key);
    if (own?.size === 0) this.#bySubject.delete(v.subject);
    return v;
  }

  /** The subject inside a key made by `key()`. */
  static #subjectOf(key: string): string {
    try {
      const v: unknown = JSON.parse(key);
      if (Array.isArray(v) && typeof v[1] === 'string') return v[1];
    } catch {
      // not one of ours: one bucket for all such keys
    }
    return '';
  }
}
