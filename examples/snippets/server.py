# An MCP server (official Python SDK) with one tool, whoami_on(provider), that calls the
# provider's user endpoint with the user's own token, which mcp-connect hands out. Against
# `mcp-connect dev`: `set -a; . ./.mcp-connect-dev.env; set +a`, then
# `.venv-mcp/bin/python examples/snippets/server.py` (serves http://127.0.0.1:8090/mcp).
import os

import anyio
import httpx2
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

from mcp_connect import Connection, JwtVerifier, McpConnect

ISSUER = os.environ["MCP_ISSUER"]
RESOURCE = os.environ.get("MCP_RESOURCE", "http://127.0.0.1:8090/mcp")
HOST, PORT = os.environ.get("MCP_LISTEN", "127.0.0.1:8090").rsplit(":", 1)
PROVIDERS = dict(p.split("=", 1) for p in os.environ["MCP_PROVIDERS"].split(","))  # name=user endpoint


async def main() -> None:
    # Callers bring the IdP's JWT access tokens for RESOURCE; the token's `sub` is the user.
    # validate_token_resource is set because, left unset, the SDK warns (MCPDeprecationWarning).
    verifier = await JwtVerifier.discover(ISSUER, RESOURCE)
    auth = AuthSettings(issuer_url=ISSUER, resource_server_url=RESOURCE, validate_token_resource=True)
    server = MCPServer("whoami", token_verifier=verifier, auth=auth)
    connect = McpConnect.from_env()  # MCP_CONNECT_URL, MCP_CONNECT_API_KEY, MCP_STATE_KEY

    @connect.tool(server, provider_arg="provider", providers=PROVIDERS)
    async def whoami_on(provider: str, connection: Connection):  # no "-> str": it would refuse the adapter's results
        """Tells who you are at a provider, asking you to connect your account there first if needed."""
        async with httpx2.AsyncClient(timeout=10) as http:
            me = (await http.get(PROVIDERS[provider], headers=connection.headers())).raise_for_status().json()
        return f"On {provider} you are {me.get('login', me.get('preferred_username'))}"

    await server.run_streamable_http_async(host=HOST, port=int(PORT))


anyio.run(main)
