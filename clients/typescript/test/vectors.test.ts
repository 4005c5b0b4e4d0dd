// The shared vectors (clients/request-state-vectors.json, written by the Rust library):
// the same canonical JSON and digests, the same sealed bytes for the same nonce, and the
// same refusals with the same reasons as the Rust and Python libraries.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { sha256 } from '@noble/hashes/sha2.js';
import {
  RequestStateError,
  RequestStateKey,
  type RequestStateRefusal,
  argumentsDigest,
  canonicalJson,
  openRequestState,
} from '@mcp-connect/client';
// For the vectors only (a fixed nonce), so not exported: from the module itself.
import { sealRequestStateWithNonce } from '../dist/requestState.js';

interface Call {
  subject: string;
  tool: string;
  arguments: unknown;
}
interface Vectors {
  format: string;
  keys: Array<{ name: string; key: string; kid: string }>;
  canonical: Array<{ arguments: unknown; canonical: string; sha256: string }>;
  seal: Array<Call & { key: string; nonce: string; elicitation_id: string; expires_at: number; now: number; state: string }>;
  open: Array<Call & { name: string; keys: string[]; elicitation_id: string; expires_at: number; now: number; state: string }>;
  refuse: Array<Call & { name: string; keys: string[]; error: RequestStateRefusal; now: number; state: string }>;
}

const v = JSON.parse(readFileSync(new URL('../../request-state-vectors.json', import.meta.url), 'utf8')) as Vectors;
const keys: Record<string, RequestStateKey> = Object.fromEntries(v.keys.map((k) => [k.name, RequestStateKey.fromBase64(k.key)]));
const key = (name: string | undefined): RequestStateKey => {
  const k = name === undefined ? undefined : keys[name];
  assert.ok(k !== undefined, `no key ${name}`);
  return k;
};
const ring = (names: string[]) => key(names[0]).withPrevious(...names.slice(1).map(key));
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

test('the vectors are mcs2 and have every section', () => {
  assert.equal(v.format, 'mcs2');
  for (const s of ['keys', 'canonical', 'seal', 'open', 'refuse'] as const) assert.ok(v[s].length > 0, s);
});

test('key ids', () => {
  for (const k of v.keys) assert.equal(RequestStateKey.fromBase64(k.key).keyId, k.kid, k.name);
});

test('canonical JSON and its SHA-256', () => {
  for (const c of v.canonical) {
    assert.equal(canonicalJson(c.arguments), c.canonical, JSON.stringify(c.arguments));
    assert.equal(hex(sha256(new TextEncoder().encode(c.canonical))), c.sha256);
    assert.equal(hex(argumentsDigest(c.arguments)), c.sha256);
  }
});

test('sealing with the given nonce gives exactly the state, which opens again', () => {
  for (const s of v.seal) {
    const call = { subject: s.subject, tool: s.tool, arguments: s.arguments };
    const nonce = Uint8Array.from(Buffer.from(s.nonce, 'hex'));
    const state = { elicitationId: s.elicitation_id, expiresAt: s.expires_at };
    assert.equal(sealRequestStateWithNonce(key(s.key), call, state, nonce), s.state);
    assert.deepEqual(openRequestState(s.state, key(s.key), call, s.now), state);
  }
});

test('open entries open', () => {
  for (const o of v.open) {
    const got = openRequestState(o.state, ring(o.keys), { subject: o.subject, tool: o.tool, arguments: o.arguments }, o.now);
    assert.deepEqual(got, { elicitationId: o.elicitation_id, expiresAt: o.expires_at }, o.name);
  }
});

test('refuse entries are refused with exactly their reason', () => {
  for (const r of v.refuse) {
    const call = { subject: r.subject, tool: r.tool, arguments: r.arguments };
    assert.throws(
      () => openRequestState(r.state, ring(r.keys), call, r.now),
      (e) => e instanceof RequestStateError && e.reason === r.error && e.message.includes('requestState'),
      r.name,
    );
  }
});
