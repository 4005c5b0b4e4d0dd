# An MCP client (official Python SDK) that calls whoami_on as the user whose MCP access token
# is MCP_TOKEN and shows the connect link when the server asks for one. It negotiates
# 2026-07-28; MCP_PROTOCOL=2025-11-25 forces the older revision (the initialize handshake).
# Against `mcp-connect dev` and a running server.py or server.mjs, in a shell that loaded the env file:
#   MCP_TOKEN=$(curl -s -u mcp-connect-dev:$MCP_CONNECT_DEV_IDP_CLIENT_SECRET -d subject=alice \
#     -d grant_type=urn:mcp-connect:dev:subject $MCP_CONNECT_DEV_IDP_URL/token | jq -r .access_token) \
#     .venv-mcp/bin/python examples/snippets/client.py
# then open the link, sign in as alice, connect, and press Enter.
import os
import sys

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError, UrlElicitationRequiredError
from mcp.client.streamable_http import streamable_http_client

URL = os.environ.get("MCP_URL", "http://127.0.0.1:8090/mcp")
MODE = "legacy" if os.environ.get("MCP_PROTOCOL") == "2025-11-25" else "auto"


async def show(url: str) -> types.ElicitResult:
    print(f"Open this link to connect: {url}", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)  # the user presses Enter when done
    return types.ElicitResult(action="accept")  # "opened it": the server asks mcp-connect what came of it


async def on_elicitation(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
    # 2026-07-28: the server answers input_required; the SDK calls this, then retries the call.
    if not isinstance(params, types.ElicitRequestURLParams):
        return types.ElicitResult(action="decline")
    return await show(params.url)


async def main() -> None:
    bearer = {"Authorization": f"Bearer {os.environ['MCP_TOKEN']}"}
    http = httpx2.AsyncClient(headers=bearer, timeout=httpx2.Timeout(30, read=300))
    # An elicitation callback declares elicitation (form and url) in the client's capabilities.
    client = Client(streamable_http_client(URL, http_client=http), mode=MODE, elicitation_callback=on_elicitation)
    async with http, client:
        try:
            result = await client.call_tool("whoami_on", {"provider": "dev"})
        except MCPError as e:  # 2025-11-25: the -32042 error; the host shows the link, then calls again
            if e.code != types.URL_ELICITATION_REQUIRED:
                raise
            for elicitation in UrlElicitationRequiredError.from_error(e.error).elicitations:
                await show(elicitation.url)
            result = await client.call_tool("whoami_on", {"provider": "dev"})
        print(result.content[0].text)


anyio.run(main)
