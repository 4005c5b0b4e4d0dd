// An MCP server (official TypeScript SDK) with one tool, whoami_on(provider), that calls the
// provider's user endpoint with the user's own token, which mcp-connect hands out. Against
// `mcp-connect dev`: build clients/typescript, `npm ci --prefix examples/snippets`, load the
// env file (`set -a; . ./.mcp-connect-dev.env; set +a`), then
// `node examples/snippets/server.mjs` (serves http://127.0.0.1:8090/mcp).
import { createServer } from 'node:http';
import { ConnectClient, RequestStateKey } from '@mcp-connect/client';
import { McpConnect, bearerAuth, createConnectHandler } from '@mcp-connect/client/server';
import { McpServer, fromJsonSchema, hostHeaderValidationResponse, originValidationResponse } from '@modelcontextprotocol/server';
import { toNodeHandler } from '@modelcontextprotocol/node';

const resource = process.env.MCP_RESOURCE ?? 'http://127.0.0.1:8090/mcp';
const [host, port] = (process.env.MCP_LISTEN ?? '127.0.0.1:8090').split(/:(?=\d+$)/);
const providers = new Map(process.env.MCP_PROVIDERS.split(',').map((p) => p.split(/=(.*)/))); // name=user endpoint

// Callers bring the IdP's JWT access tokens for `resource`; the token's `sub` is the user.
const auth = await bearerAuth({ issuer: process.env.MCP_ISSUER, resource });
// serverName: what the prompt says needs the access ("whoami needs access to your ... account").
const connect = new McpConnect({ client: ConnectClient.fromEnv(), stateKey: RequestStateKey.fromEnv(), serverName: 'whoami' });
const inputSchema = fromJsonSchema({ type: 'object', properties: { provider: { type: 'string' } }, required: ['provider'] });
const description = 'Tells who you are at a provider, asking you to connect your account there first if needed.';

async function whoamiOn({ provider }, { token }) {
  const headers = { authorization: `Bearer ${token.reveal()}` };
  const r = await fetch(providers.get(provider), { headers, signal: AbortSignal.timeout(10_000) });
  if (!r.ok) throw new Error(`${provider} answered ${r.status}`);
  const me = await r.json();
  return { content: [{ type: 'text', text: `On ${provider} you are ${me.login ?? me.preferred_username}` }] };
}

// One McpServer per request (2026-07-28) or per session (2025-11-25, which -32042 needs).
const mcp = createConnectHandler(() => {
  const server = new McpServer({ name: 'whoami', version: '1.0.0' });
  const options = { providerArg: 'provider', knownProviders: [...providers.keys()] };
  connect.registerTool(server, 'whoami_on', { description, inputSchema }, options, whoamiOn);
  return server;
});

const hostnames = [new URL(resource).hostname]; // DNS rebinding: requests for our own host only
async function handle(request) {
  const early = hostHeaderValidationResponse(request, hostnames) ?? originValidationResponse(request, hostnames)
    ?? auth.metadataResponse(request); // a refused Host or Origin, or the RFC 9728 metadata
  if (early) return early;
  if (new URL(request.url).pathname !== '/mcp') return new Response('not found', { status: 404 });
  const info = await auth.authenticate(request); // who calls, or the 401 to answer
  return info instanceof Response ? info : mcp.fetch(request, { authInfo: info });
}

createServer(toNodeHandler({ fetch: handle })).listen(Number(port), host, function () {
  console.log(`listening on http://${host}:${this.address().port}/mcp`);
});
