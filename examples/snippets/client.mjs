// An MCP client (official TypeScript SDK) that calls whoami_on as the user whose MCP access
// token is MCP_TOKEN and shows the connect link when the server asks for one. It speaks
// 2025-11-25 unless MCP_PROTOCOL=2026-07-28 pins the newer revision. Against `mcp-connect dev`
// and a running server.mjs or server.py, in a shell that loaded the env file:
//   MCP_TOKEN=$(curl -s -u mcp-connect-dev:$MCP_CONNECT_DEV_IDP_CLIENT_SECRET -d subject=alice \
//     -d grant_type=urn:mcp-connect:dev:subject $MCP_CONNECT_DEV_IDP_URL/token | jq -r .access_token) \
//     node examples/snippets/client.mjs
// then open the link, sign in as alice, connect, and press Enter.
import { createInterface } from 'node:readline/promises';
import { Client, StreamableHTTPClientTransport, UrlElicitationRequiredError } from '@modelcontextprotocol/client';

const url = new URL(process.env.MCP_URL ?? 'http://127.0.0.1:8090/mcp');
const headers = { Authorization: `Bearer ${process.env.MCP_TOKEN}` };
const mode = process.env.MCP_PROTOCOL === '2026-07-28' ? { pin: '2026-07-28' } : 'legacy';
const stdin = createInterface({ input: process.stdin });

async function show(link) {
  console.log(`Open this link to connect: ${link}`);
  await stdin.question(''); // the user presses Enter when done
  return { action: 'accept' }; // "opened it": the server asks mcp-connect what came of it
}

// Without elicitation.url in the capabilities, the server answers with the setup link as text.
const capabilities = { elicitation: { url: {} } };
const client = new Client({ name: 'whoami-client', version: '1.0.0' }, { capabilities, versionNegotiation: { mode } });
// 2026-07-28: the server answers input_required; the SDK calls this handler, then retries the call.
client.setRequestHandler('elicitation/create', ({ params }) =>
  params.mode === 'url' ? show(params.url) : { action: 'decline' });
await client.connect(new StreamableHTTPClientTransport(url, { requestInit: { headers } }));

const call = () => client.callTool({ name: 'whoami_on', arguments: { provider: 'dev' } });
let result;
try {
  result = await call();
} catch (e) { // 2025-11-25: the -32042 error; the host shows the link, then calls again
  if (!(e instanceof UrlElicitationRequiredError)) throw e;
  for (const elicitation of e.elicitations) await show(elicitation.url);
  result = await call();
}
console.log(result.content[0].text);
await client.close();
stdin.close();
