// Each check of the requestState seal refuses what it is there to refuse, with its reason.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  CanonicalizationError,
  InvalidRequestStateKeyError,
  RequestStateError,
  RequestStateKey,
  argumentsDigest,
  canonicalJson,
  openRequestState,
  sealRequestState,
  type RequestStateRefusal,
  type ToolCall,
} from '@mcp-connect/client';

const key = RequestStateKey.fromBytes(new Uint8Array(32).fill(7));
const now = 1_900_000_000;
const state = { elicitationId: '3f2b8c1e-0d4a-4e5b-9c6d-7e8f9a0b1c2d', expiresAt: now + 600 };
const call: ToolCall = { subject: 'alice', tool: 'whoami_on', arguments: { provider: 'github', verbose: true } };
const refusedAs = (reason: RequestStateRefusal) => (e: unknown) => e instanceof RequestStateError && e.reason === reason && e.message.includes('requestState');
const split = (s: string): [string, Buffer] => [s.slice(0, s.lastIndexOf('.') + 1), Buffer.from(s.slice(s.lastIndexOf('.') + 1), 'base64url')];

test('a sealed state opens for the same call, and hides the id and the subject', () => {
  const sealed = sealRequestState(key, call, state);
  assert.match(sealed, new RegExp(`^mcs2\\.${key.keyId}\\.[A-Za-z0-9_-]+$`));
  assert.equal(key.keyId.length, 8);
  assert.deepEqual(openRequestState(sealed, key, call, now), state);
  assert.ok(!sealed.includes('alice') && !split(sealed)[1].toString('latin1').includes('3f2b8c1e'));
  assert.notEqual(sealed, sealRequestState(key, call, state), 'a fresh nonce per seal');
});

test('a changed byte of the nonce, the ciphertext or the tag is invalid', () => {
  const [head, raw] = split(sealRequestState(key, call, state));
  for (const i of [0, 23, 24, raw.length - 17, raw.length - 1]) {
    const forged = Buffer.from(raw);
    forged.writeUInt8(forged.readUInt8(i) ^ 1, i);
    assert.throws(() => openRequestState(head + forged.toString('base64url'), key, call, now), refusedAs('invalid'), `byte ${i}`);
  }
});

test('another subject, tool or arguments is invalid; the parts are length-prefixed', () => {
  const sealed = sealRequestState(key, call, state);
  for (const other of [
    { ...call, subject: 'bob' },
    { ...call, tool: 'delete_repo' },
    { ...call, arguments: { provider: 'gitlab', verbose: true } },
    { ...call, arguments: null },
    { subject: 'alic', tool: 'ewhoami_on', arguments: call.arguments },
  ]) {
    assert.throws(() => openRequestState(sealed, key, other, now), refusedAs('invalid'), JSON.stringify(other));
  }
  // Reordered keys are the same arguments.
  assert.deepEqual(openRequestState(sealed, key, { ...call, arguments: { verbose: true, provider: 'github' } }, now), state);
});

test('at and after the deadline a genuine state is expired; before it, it opens', () => {
  const sealed = sealRequestState(key, call, state);
  assert.deepEqual(openRequestState(sealed, key, call, state.expiresAt - 0.5), state);
  assert.throws(() => openRequestState(sealed, key, call, state.expiresAt), refusedAs('expired'));
  assert.throws(() => openRequestState(sealed, key, call, state.expiresAt + 3600), refusedAs('expired'));
});

test('a state under another key is invalid until that key is a previous one; the key id picks the key', () => {
  const old = RequestStateKey.fromBytes(new Uint8Array(32).fill(9));
  const sealed = sealRequestState(old, call, state);
  assert.throws(() => openRequestState(sealed, key, call, now), refusedAs('invalid'));
  const rotated = key.withPrevious(old);
  assert.deepEqual(openRequestState(sealed, rotated, call, now), state);
  assert.equal(rotated.keyId, key.keyId, 'the current key still seals');
  const relabelled = sealed.replace(old.keyId, key.keyId);
  assert.throws(() => openRequestState(relabelled, rotated, call, now), refusedAs('invalid'));
});

test('malformed states are refused before any key is tried', () => {
  const sealed = sealRequestState(key, call, state);
  const body = sealed.slice(sealed.lastIndexOf('.') + 1);
  const malformed: unknown[] = [
    '',
    'mcs2.',
    `mcs2.${key.keyId}`,
    `mcs2.${key.keyId}.!!!!`,
    `mcs2.${key.keyId}.${Buffer.alloc(39).toString('base64url')}`, // shorter than nonce + tag
    sealed.replace('mcs2.', 'mcs1.'),
    `${sealed}${'A'.repeat(2049 - sealed.length)}`,
    `mcs2.${key.keyId}.${body}=`, // padding is not base64url-without-padding
    `mcs2.${key.keyId}.${body.slice(0, 10)} ${body.slice(10)}`,
    12345, // an untyped caller's
  ];
  for (const bad of malformed) {
    assert.throws(() => openRequestState(bad as string, key, call, now), refusedAs('malformed'), String(bad).slice(0, 30));
  }
});

test('a last character that only changes unused bits is refused, not decoded to the same bytes', () => {
  // 24 + ciphertext + 16 bytes: an id length whose base64url ends in a partial group.
  const sealed = sealRequestState(key, call, { ...state, elicitationId: 'abcd' });
  const body = sealed.slice(sealed.lastIndexOf('.') + 1);
  assert.notEqual(body.length % 4, 0, 'the body ends in a partial group');
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  const last = alphabet.indexOf(body.slice(-1));
  const sibling = alphabet.charAt(last ^ 1); // differs in the lowest bit only, which is padding here
  const edited = sealed.slice(0, -1) + sibling;
  assert.deepEqual(Buffer.from(edited.slice(edited.lastIndexOf('.') + 1), 'base64url'), Buffer.from(body, 'base64url'));
  assert.throws(() => openRequestState(edited, key, call, now), refusedAs('malformed'));
});

test('arguments with an unpaired surrogate cannot be sealed, and open nothing', () => {
  const lone = { ...call, arguments: { s: '\ud800' } };
  assert.throws(() => sealRequestState(key, lone, state), CanonicalizationError);
  assert.throws(() => canonicalJson({ '\udc00': 1 }), CanonicalizationError);
  const sealed = sealRequestState(key, call, state);
  assert.throws(() => openRequestState(sealed, key, lone, now), refusedAs('invalid'));
  assert.equal(canonicalJson({ s: '\ud83d\ude00' }), '{"s":"😀"}', 'a pair is fine');
});

test('canonical JSON sorts by UTF-16 code units, not JavaScript property order', () => {
  assert.equal(JSON.stringify({ 9: 1, 10: 2 }), '{"9":1,"10":2}');
  assert.equal(canonicalJson({ 9: 1, 10: 2 }), '{"10":2,"9":1}');
  assert.equal(canonicalJson({ '\u{1F600}': 1, '\uFB00': 2 }), '{"😀":1,"ﬀ":2}'); // surrogates sort below U+FB00
  assert.equal(canonicalJson([-0, 1e21, 1e-7, 0.1, 100]), '[0,1e+21,1e-7,0.1,100]');
  assert.equal(canonicalJson(null), '{}');
  assert.equal(canonicalJson(undefined), '{}');
  assert.throws(() => canonicalJson({ n: Infinity }), CanonicalizationError);
  assert.throws(() => canonicalJson({ n: 1n }), CanonicalizationError);
  assert.deepEqual(argumentsDigest(null), argumentsDigest({}));
});

test('keys are 32 bytes of canonical standard base64 and never print', () => {
  const b64 = Buffer.alloc(32, 1).toString('base64');
  const k = RequestStateKey.fromBase64(` ${b64}\n`);
  assert.equal(k.keyId, RequestStateKey.fromBytes(new Uint8Array(32).fill(1)).keyId);
  for (const bad of ['c2hvcnQ=', 'not base64!', Buffer.alloc(33).toString('base64'), b64.replace(/=$/, ''), Buffer.alloc(32, 0xfb).toString('base64').replace('+', '-')]) {
    assert.throws(() => RequestStateKey.fromBase64(bad), InvalidRequestStateKeyError, bad);
  }
  assert.throws(() => RequestStateKey.fromBytes(new Uint8Array(31)), InvalidRequestStateKeyError);
});
