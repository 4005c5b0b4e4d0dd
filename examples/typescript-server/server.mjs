// An MCP server with one tool, whoami_on(provider), that needs the user's token at a
// downstream provider and gets it from mcp-connect. It serves 2026-07-28 clients
// (input_required + a sealed requestState) and 2025-11-25 clients (the -32042 error in a
// session, then notifications/elicitation/complete), both from @modelcontextprotocol/server
// 2.4. Settings from the environment, as the Rust example (README).
import { STATUS_CODES, createServer } from 'node:http';
import { ConnectClient, RequestStateKey } from '@mcp-connect/client';
import { McpConnect, bearerAuth, createConnectHandler } from '@mcp-connect/client/server';
import { McpServer, fromJsonSchema, hostHeaderValidationResponse, originValidationResponse } from '@modelcontextprotocol/server';
import { toNodeHandler } from '@modelcontextprotocol/node';

const env = (name, fallback) => process.env[name] ?? fallback ?? fail(`${name} is not set`);
const fail = (message) => { throw new Error(message); };
const listen = env('MCP_LISTEN', '127.0.0.1:8090');
const publicUrl = env('MCP_PUBLIC_URL', `http://${listen}`).replace(/\/$/, '');
const issuer = env('MCP_ISSUER');
const resource = env('MCP_RESOURCE', `${publicUrl}/mcp`);
const providers = new Map(env('MCP_PROVIDERS').split(',').filter((p) => p.trim()).map((p) => p.split('=').map((s) => s.trim())));
const metadataUrl = `${publicUrl}/.well-known/oauth-protected-resource`;
const publicOrigin = new URL(publicUrl);

// MCP authorization: the IdP's RS256/PS256/ES256 JWT access tokens (typ at+jwt), for this
// resource, checked by @mcp-connect/client's JwtVerifier behind the SDK's requireBearerAuth.
// Why a token was refused goes to stderr (console.warn), never to the client.
const auth = await bearerAuth({ issuer, resource, resourceMetadataUrl: metadataUrl });

// The mcp-connect wiring: a client, the requestState key, one connected tool.
const client = new ConnectClient({ baseUrl: env('MCP_CONNECT_URL'), apiKey: env('MCP_CONNECT_API_KEY') });
const connect = new McpConnect({ client, stateKey: RequestStateKey.fromBase64(env('MCP_STATE_KEY')), serverName: 'whoami' });
const inputSchema = fromJsonSchema({ type: 'object', properties: { provider: { type: 'string', description: 'The provider to ask, as configured in mcp-connect (e.g. "github").' } }, required: ['provider'], additionalProperties: false });

async function whoami(provider, token) {
  const r = await fetch(providers.get(provider), { headers: { authorization: `Bearer ${token.reveal()}` }, redirect: 'error', signal: AbortSignal.timeout(10_000) }).catch(() => undefined);
  if (!r?.ok) return { content: [{ type: 'text', text: r ? `${provider} refused the request (${r.status} ${STATUS_CODES[r.status] ?? ''}).` : `${provider} could not be reached.` }], isError: true };
  const me = await r.json().catch(() => undefined);
  if (me === undefined) return { content: [{ type: 'text', text: `${provider} answered something that is not JSON.` }], isError: true };
  const login = me.login ?? me.preferred_username ?? null;
  const id = me.id ?? me.sub ?? null;
  return { content: [{ type: 'text', text: `On ${provider} you are ${typeof login === 'string' ? login : '?'} (account id ${JSON.stringify(id)}).` }], structuredContent: { connected: true, provider, login, id } };
}

function factory() {
  const server = new McpServer({ name: 'mcp-connect-example-typescript', version: '0.1.0' }, { instructions: 'whoami_on(provider) shows your account at a connected provider.' });
  const description = 'Tells who you are at a provider, with your own account there. Asks you to connect the account first if needed.';
  connect.registerTool(server, 'whoami_on', { description, inputSchema }, { providerArg: 'provider', knownProviders: [...providers.keys()] }, ({ provider }, conn) => whoami(provider, conn.token));
  return server;
}

// The SDK's Origin check compares the hostname only; a page on another port or scheme of
// the same host is another origin too.
function sameOrigin(request) {
  const origin = request.headers.get('origin');
  if (!origin || new URL(origin).origin === publicOrigin.origin) return undefined;
  return Response.json({ jsonrpc: '2.0', error: { code: -32000, message: `Invalid Origin: ${origin}` }, id: null }, { status: 403 });
}

const mcp = createConnectHandler(factory, { onerror: (e) => console.error(`mcp: ${e.message}`) });
const node = toNodeHandler({
  async fetch(request) {
    // DNS rebinding and cross-site requests: the Host must be ours, and so must the Origin
    // when there is one (browsers send it; other MCP clients do not, and pass).
    const rejected = hostHeaderValidationResponse(request, [publicOrigin.hostname]) ?? originValidationResponse(request, [publicOrigin.hostname]) ?? sameOrigin(request);
    if (rejected) return rejected;
    const path = new URL(request.url).pathname;
    const metadata = auth.metadataResponse(request); // RFC 9728, at /.well-known/oauth-protected-resource
    if (metadata) return metadata;
    if (path !== '/mcp') return new Response('not found', { status: 404 });
    const info = await auth.authenticate(request);
    return info instanceof Response ? info : mcp.fetch(request, { authInfo: info });
  },
});
const [host, port] = [listen.slice(0, listen.lastIndexOf(':')), Number(listen.slice(listen.lastIndexOf(':') + 1))];
createServer(node).listen(port, host, function () {
  console.log(`listening on ${host}:${this.address().port}`);
});
