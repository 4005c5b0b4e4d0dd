// Small pieces the tests share.

import type { Server } from 'node:http';

/** What a promise settled with: its value, or what it was rejected with. */
export function settled(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    (v) => v,
    (e: unknown) => e,
  );
}

/** Starts `server` on 127.0.0.1 and an ephemeral port; its base URL. */
export async function listen(server: Server): Promise<string> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('not a TCP listener');
  return `http://127.0.0.1:${address.port}`;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
