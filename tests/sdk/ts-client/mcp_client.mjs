// A real MCP client (the official TypeScript SDKs) driven line by line by a Rust test: the
// same stdin/stdout protocol as crates/example-mcp-server/tests/mcp_client.py, one JSON
// object per line:
//
//   -> {"cmd": "connect", "url", "token", "mode": "legacy" | "auto" | "2026-07-28", "url_elicitation": true}
//   <- {"ok": true, "protocol_version": "..."}
//   -> {"cmd": "list_tools"}                          <- {"result": {...}}
//   -> {"cmd": "call", "name", "arguments"}
//   <- {"event": "elicit", "params": {...}}           when the client must show a URL
//   -> {"answer": "accept" | "decline" | "cancel"}    what the user chose (the test acts as the user)
//   <- {"result": {...}} | {"error": {code, message, data}} | {"not_retried": {"actions"}}, with "rounds" in legacy
//   -> {"cmd": "call_once", "name", "arguments", "request_state", "input_responses"}
//   <- {"result": {...}} | {"input_required": {...}} | {"error": {...}}
//   -> {"cmd": "close"}                               <- {"ok": true}
//
// mode `legacy` is 2025-11-25 with @modelcontextprotocol/sdk 1.32: the SDK surfaces -32042
// as an error, and the host (this script) shows each URL and repeats the call after
// `accept`. `auto` and `2026-07-28` use @modelcontextprotocol/client 2.4, whose own
// input_required driver calls the elicitation handler below and retries. `call_once`
// drives one round by hand (for tampered or foreign requestState). `url_elicitation:
// false` declares no elicitation capability. MCP_WIRE_LOG=1 logs each request to stderr.

import { createInterface } from 'node:readline';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Client as LegacyClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as LegacyTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const MAX_LEGACY_ROUNDS = 5;
const URL_ELICITATION_REQUIRED = -32042;

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const send = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);
async function receive() {
  const { value, done } = await lines.next();
  if (done) throw new Error('stdin closed');
  return JSON.parse(value);
}

/** Drops what the SDK adds on its own (request _meta), as the Python script's dump does. */
function dump(value) {
  if (value === null || typeof value !== 'object') return value;
  const { _meta, ...rest } = value;
  return rest;
}

/** The host shows the URL and asks the user; the Rust test answers for the user. */
async function askUser(params) {
  send({ event: 'elicit', params: dump(params) });
  const { answer } = await receive();
  if (!['accept', 'decline', 'cancel'].includes(answer)) throw new Error(`bad answer ${JSON.stringify(answer)}`);
  return answer;
}

// SDK 1.32 prefixes its messages with "MCP error <code>: "; the wire message is what follows.
const errorOf = (e) => ({ code: e.code ?? 0, message: String(e.message).replace(/^MCP error -?\d+: /, ''), data: e.data ?? null });

/** 2025-11-25: -32042 is an error; show its URLs, repeat the call after accept. */
async function callLegacy(client, name, args) {
  const rounds = [];
  for (let i = 0; i < MAX_LEGACY_ROUNDS; i++) {
    try {
      return { result: await client.callTool({ name, arguments: args }), rounds };
    } catch (e) {
      if (e.code !== URL_ELICITATION_REQUIRED) return { error: errorOf(e), rounds };
      const actions = [];
      for (const elicitation of e.data?.elicitations ?? []) actions.push(await askUser(elicitation));
      rounds.push({ error: errorOf(e), actions });
      if (actions.some((a) => a !== 'accept')) return { not_retried: { actions }, rounds };
    }
  }
  return { error: { code: 0, message: 'too many rounds' }, rounds };
}

function wireLog(headers) {
  if (!process.env.MCP_WIRE_LOG) return undefined;
  return async (url, init) => {
    const version = new Headers(init?.headers).get('mcp-protocol-version');
    process.stderr.write(`>> ${init?.method ?? 'GET'} ${version} ${typeof init?.body === 'string' ? init.body : ''}\n`);
    const r = await fetch(url, init);
    process.stderr.write(`<< ${r.status} ${r.headers.get('content-type')}\n`);
    return r;
  };
}

async function connect(cmd) {
  const headers = { Authorization: `Bearer ${cmd.token}` };
  const info = { name: 'mcp-connect-ts-test-client', version: '0.1.0' };
  // Elicitation {form, url} exactly when URL elicitation is wanted, as the Python SDK does.
  const capabilities = cmd.url_elicitation ? { elicitation: { form: {}, url: {} } } : {};
  const fetchLog = wireLog();
  const transportOptions = { requestInit: { headers }, ...(fetchLog && { fetch: fetchLog }) };
  const handler = async (request) => ({ action: await askUser(request.params) });
  if (cmd.mode === 'legacy') {
    const client = new LegacyClient(info, { capabilities });
    if (cmd.url_elicitation) client.setRequestHandler(ElicitRequestSchema, handler);
    const transport = new LegacyTransport(new URL(cmd.url), transportOptions);
    await client.connect(transport);
    return { client, legacy: true, version: transport.protocolVersion ?? '2025-11-25' };
  }
  const mode = cmd.mode === 'auto' ? 'auto' : { pin: cmd.mode };
  const client = new Client(info, { capabilities, versionNegotiation: { mode } });
  if (cmd.url_elicitation) client.setRequestHandler('elicitation/create', handler);
  await client.connect(new StreamableHTTPClientTransport(new URL(cmd.url), transportOptions));
  return { client, legacy: client.getNegotiatedProtocolVersion() < '2026-07-28', version: client.getNegotiatedProtocolVersion() };
}

async function main() {
  const first = await receive();
  if (first.cmd !== 'connect') throw new Error(`expected connect, got ${JSON.stringify(first)}`);
  const { client, legacy, version } = await connect(first);
  send({ ok: true, protocol_version: version });
  for (;;) {
    const cmd = await receive();
    if (cmd.cmd === 'close') {
      await client.close().catch(() => {});
      send({ ok: true });
      return;
    }
    if (cmd.cmd === 'list_tools') {
      send({ result: await client.listTools() });
    } else if (cmd.cmd === 'call') {
      if (legacy) {
        send(await callLegacy(client, cmd.name, cmd.arguments));
        continue;
      }
      try {
        send({ result: await client.callTool({ name: cmd.name, arguments: cmd.arguments }) });
      } catch (e) {
        send({ error: errorOf(e) });
      }
    } else if (cmd.cmd === 'call_once') {
      const params = {
        name: cmd.name,
        arguments: cmd.arguments,
        ...(cmd.input_responses != null && { inputResponses: cmd.input_responses }),
        ...(cmd.request_state != null && { requestState: cmd.request_state }),
      };
      try {
        const result = await client.callTool(params, { allowInputRequired: true });
        send(result?.resultType === 'input_required' ? { input_required: result } : { result });
      } catch (e) {
        send({ error: errorOf(e) });
      }
    } else {
      throw new Error(`unknown command ${JSON.stringify(cmd)}`);
    }
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`${e?.stack ?? e}\n`);
    process.exit(1);
  },
);
