// The 2025-11-25 completion watchers against a real node:http peer that answers
// GET /v1/elicitations/{id} as mcp-connect does: held while pending (wait_seconds), or at
// once, as mcp-connect answers whenever it does not hold requests (its change listener
// down, draining, elicitations.max_wait_seconds = 0, its waiter cap full).

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, test } from 'node:test';
import { ConnectClient, RequestStateKey } from '@mcp-connect/client';
// The SDK-independent part of both adapters (not exported): from the module itself.
import { ConnectGate, type McpConnectOptions } from '../dist/gate.js';
import { listen, sleep } from './helpers.js';

const uuid = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

interface PeerState {
  gets: Array<{ id: string; at: number; wait: string | null }>;
  /** Requests still open, by elicitation id. */
  open: Map<string, number>;
  /** The status each elicitation answers with (default `pending`). */
  status: Map<string, string>;
}

async function peer({ hold }: { hold: boolean | number }) {
  const state: PeerState = { gets: [], open: new Map(), status: new Map() };
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const id = decodeURIComponent(url.pathname.split('/')[3] ?? '');
    state.gets.push({ id, at: Date.now(), wait: url.searchParams.get('wait_seconds') });
    state.open.set(id, (state.open.get(id) ?? 0) + 1);
    let gone = false;
    res.on('close', () => {
      gone = true;
      state.open.set(id, (state.open.get(id) ?? 0) - 1);
    });
    const answer = () => {
      if (gone) return;
      const t = new Date().toISOString();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id, status: state.status.get(id) ?? 'pending', subject: 's', provider: 'dev', scopes: [], created_at: t, expires_at: t, completed_at: null }));
    };
    if (!hold) {
      answer();
      return;
    }
    // hold: true holds for wait_seconds, a number for that many ms at most.
    const until = Date.now() + (hold === true ? Number(url.searchParams.get('wait_seconds') ?? 0) * 1000 : hold);
    const tick = () => ((state.status.get(id) ?? 'pending') === 'pending' && Date.now() < until && !gone ? setTimeout(tick, 20) : answer());
    tick();
  });
  const url = await listen(server);
  after(() => {
    server.closeAllConnections();
    server.close();
  });
  const gets = (id?: string) => state.gets.filter((g) => id === undefined || g.id === id);
  const open = (id: string) => state.open.get(id) ?? 0;
  return { url, state, gets, open };
}

function gateFor(p: { url: string }, extra: Partial<McpConnectOptions> = {}) {
  const warnings: string[] = [];
  const gate = new ConnectGate({ client: new ConnectClient({ baseUrl: p.url, apiKey: 'mcpc_test_key' }), stateKey: RequestStateKey.generate(), logger: { warn: (m) => warnings.push(m) }, ...extra });
  return { gate, warnings };
}

const eventually = async (f: () => boolean, what = 'the condition', ms = 5000) => {
  for (const end = Date.now() + ms; Date.now() < end; ) {
    if (f()) return;
    await sleep(20);
  }
  assert.fail(`timed out waiting for ${what}`);
};
/** A notify that does nothing. */
const nothing = () => Promise.resolve();
/** A notify that records `who`. */
const tell = (told: string[], who: string) => () => {
  told.push(who);
  return Promise.resolve();
};

/** Each test ends within this, whatever the code under test does. */
const T = { timeout: 15_000 };

test('a service that answers pending at once is not hammered: a bounded number of GETs in 3 s, and the abort still ends it', T, async () => {
  const p = await peer({ hold: false });
  const { gate } = gateFor(p);
  const controller = new AbortController();
  let ended = false;
  const watching = gate.watchCompletion(uuid(1), Date.now() / 1000 + 900, nothing, controller.signal, 'alice').then(() => (ended = true));
  await sleep(3000);
  // Asked at 0, then after about 2 s (1.5 to 2.5), then after about 4 s more: at most 2
  // in 3 s. A tight loop would have asked hundreds of times.
  const n = p.gets().length;
  assert.ok(n >= 1 && n <= 3, `${n} GETs in 3 s`);
  assert.ok(!ended, 'still watching');
  const aborted = Date.now();
  controller.abort(); // the session ended, in the middle of a pause
  await watching;
  assert.ok(Date.now() - aborted < 200, 'the pause ends with the abort');
  await sleep(300);
  assert.equal(p.gets().length, n, 'nothing asked after the abort');
  assert.equal(gate.watching, 0);
});

test('the expiry ends the pause too, and the wait asked for never outlasts the elicitation', T, async () => {
  const p = await peer({ hold: false });
  const { gate } = gateFor(p);
  const started = Date.now();
  await gate.watchCompletion(uuid(1), Date.now() / 1000 + 1.2, nothing, new AbortController().signal, 'alice');
  const took = Date.now() - started;
  assert.ok(took >= 1000 && took < 1800, `ended after ${took} ms, at the expiry (not after a full pause)`);
  assert.ok(p.gets().length <= 2);
  assert.equal(p.gets()[0]?.wait, '2', 'ceil(1.2 s left)');
});

test('a poll that was held (over 1 s) and answers pending is asked again at once', T, async () => {
  const p = await peer({ hold: 1200 });
  const { gate } = gateFor(p);
  const controller = new AbortController();
  const watching = gate.watchCompletion(uuid(1), Date.now() / 1000 + 900, nothing, controller.signal, 'alice');
  await sleep(2900);
  // Asked at 0, 1.2 and 2.4 s; with a pause after each, the third would come at 4.2 s at
  // the earliest.
  assert.equal(p.gets().length, 3);
  controller.abort();
  await watching;
});

test('one long poll per elicitation, fanned out to every session waiting on it', T, async () => {
  const p = await peer({ hold: true });
  const { gate } = gateFor(p);
  const told: string[] = [];
  const a = new AbortController();
  const b = new AbortController();
  const exp = Date.now() / 1000 + 900;
  const wa = gate.watchCompletion(uuid(1), exp, tell(told, 'a'), a.signal, 'alice');
  const wb = gate.watchCompletion(uuid(1), exp, tell(told, 'b'), b.signal, 'alice');
  await eventually(() => p.open(uuid(1)) >= 1, 'the poll');
  await sleep(200);
  assert.equal(p.gets(uuid(1)).length, 1, 'one GET for both sessions');
  assert.equal(p.open(uuid(1)), 1);
  assert.equal(gate.watching, 1);
  p.state.status.set(uuid(1), 'completed');
  await Promise.all([wa, wb]);
  assert.deepEqual(told.sort(), ['a', 'b'], 'both sessions are notified');
  assert.equal(gate.watching, 0);
});

test('the shared poll stops only when the last session waiting on it ends', T, async () => {
  const p = await peer({ hold: true });
  const { gate } = gateFor(p);
  const a = new AbortController();
  const b = new AbortController();
  const exp = Date.now() / 1000 + 900;
  const wa = gate.watchCompletion(uuid(1), exp, nothing, a.signal, 'alice');
  const wb = gate.watchCompletion(uuid(1), exp, nothing, b.signal, 'alice');
  await eventually(() => p.open(uuid(1)) >= 1, 'the poll');
  await sleep(100);
  assert.equal(p.open(uuid(1)), 1, 'one poll for both sessions');
  a.abort();
  await wa;
  await sleep(100);
  assert.equal(p.open(uuid(1)), 1, 'still held for the other session');
  b.abort();
  await wb;
  await eventually(() => p.open(uuid(1)) === 0, 'the poll to stop');
  assert.equal(gate.watching, 0);
});

test('one subject holds at most 4 watchers (its oldest stops); others are not affected', T, async () => {
  const p = await peer({ hold: true });
  const { gate } = gateFor(p);
  const exp = Date.now() / 1000 + 900;
  const signal = new AbortController().signal;
  const ended = new Set<number>();
  const watch = (n: number, sub: string) => gate.watchCompletion(uuid(n), exp, nothing, signal, sub).then(() => ended.add(n));
  for (let n = 1; n <= 4; n++) void watch(n, 'alice');
  void watch(100, 'bob');
  await eventually(() => [1, 2, 3, 4, 100].every((n) => p.open(uuid(n)) === 1), 'the five polls');
  void watch(5, 'alice');
  await eventually(() => ended.has(1), "alice's oldest watcher to end");
  await eventually(() => p.open(uuid(1)) === 0 && p.open(uuid(5)) === 1, "alice's oldest poll to stop");
  assert.deepEqual([...ended], [1], "only alice's oldest stopped");
  assert.equal(gate.watching, 5, "alice's 4 and bob's");
  for (const n of [2, 3, 4, 5, 100]) assert.equal(p.open(uuid(n)), 1);
  for (const n of [2, 3, 4, 5, 100]) p.state.status.set(uuid(n), 'expired');
  await eventually(() => gate.watching === 0);
});

test('past maxWatchers in all, a new watcher is not started', T, async () => {
  const p = await peer({ hold: true });
  const { gate, warnings } = gateFor(p, { maxWatchers: 2 });
  const exp = Date.now() / 1000 + 900;
  const signal = new AbortController().signal;
  void gate.watchCompletion(uuid(1), exp, nothing, signal, 'alice');
  void gate.watchCompletion(uuid(2), exp, nothing, signal, 'bob');
  await gate.watchCompletion(uuid(3), exp, nothing, signal, 'carol'); // resolves at once
  assert.equal(gate.watching, 2);
  assert.deepEqual(warnings, ['too many completion watchers: this one is not started']);
  await sleep(100);
  assert.equal(p.gets(uuid(3)).length, 0);
  p.state.status.set(uuid(1), 'expired');
  p.state.status.set(uuid(2), 'expired');
  await eventually(() => gate.watching === 0);
});
