#!/usr/bin/env node
// One MCP session through mcp-connect's proxy, made by the official TypeScript SDK's client
// (@modelcontextprotocol/sdk 1.32.2, Streamable HTTP): initialize, tools/list, a call of the
// tool named in the arguments. The caller holds mcp-connect's server key, never the user's
// token: mcp-connect puts the user's token on each request it forwards.
//
//   node proxied_session.mjs '{"url": "<base>/v1/proxy/<provider>/mcp",
//                              "headers": {"Authorization": "Bearer <server key>",
//                                          "MCP-Connect-Subject": "alice"},
//                              "tool": "whoami"}'
//
// stdout: one JSON line {"server": {...}, "tools": [...], "result": {...}} or {"error": "..."}.

import process from 'node:process';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const cfg = JSON.parse(process.argv[2] ?? '{}');
const out = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
try {
  const client = new Client({ name: 'proxied-session', version: '0.1.0' });
  const transport = new StreamableHTTPClientTransport(new URL(cfg.url), { requestInit: { headers: cfg.headers } });
  await client.connect(transport);
  const tools = (await client.listTools()).tools.map((t) => t.name);
  const result = await client.callTool({ name: cfg.tool, arguments: {} });
  out({ server: client.getServerVersion(), protocol: transport.protocolVersion ?? null, tools, result });
  await client.close();
} catch (e) {
  out({ error: String(e?.message ?? e), code: e?.code ?? null });
  process.exitCode = 1;
}
