"""An MCP server (official Python SDK, Streamable HTTP at /mcp) with one tool,
`whoami_on(provider)`, that gets the user's token at a provider from mcp-connect and calls
the provider's user endpoint with it. Settings from the environment, as the Rust example:

MCP_LISTEN (host:port, default 127.0.0.1:8090), MCP_PUBLIC_URL (default http://<MCP_LISTEN>),
MCP_ISSUER, MCP_RESOURCE (default <MCP_PUBLIC_URL>/mcp), MCP_CONNECT_URL,
MCP_CONNECT_API_KEY, MCP_STATE_KEY (32 bytes, standard base64),
MCP_PROVIDERS (name=user-endpoint-url,...).
"""

from __future__ import annotations

import json
import os
from typing import Annotated
from urllib.parse import urlsplit

import anyio
import httpx2
import uvicorn
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, TextContent
from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse

from mcp_connect import Connection, JwtVerifier, McpConnect

LISTEN = os.environ.get("MCP_LISTEN", "127.0.0.1:8090")
PUBLIC = os.environ.get("MCP_PUBLIC_URL", f"http://{LISTEN}").rstrip("/")
ISSUER = os.environ["MCP_ISSUER"]
RESOURCE = os.environ.get("MCP_RESOURCE", f"{PUBLIC}/mcp")
PROVIDERS = dict(p.strip().split("=", 1) for p in os.environ["MCP_PROVIDERS"].split(",") if p.strip())


def text(message: str, structured: dict[str, object] | None = None, error: bool = False) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=message)], structured_content=structured, is_error=error
    )


async def main() -> None:
    # MCP authorization: the IdP's JWT access tokens for this resource; the SDK answers
    # 401 with the RFC 9728 pointer and serves the metadata.
    verifier = await JwtVerifier.discover(ISSUER, RESOURCE)
    auth = AuthSettings(issuer_url=ISSUER, resource_server_url=RESOURCE, validate_token_resource=True)
    server = MCPServer("whoami", token_verifier=verifier, auth=auth)
    connect = McpConnect(os.environ["MCP_CONNECT_URL"], os.environ["MCP_CONNECT_API_KEY"], os.environ["MCP_STATE_KEY"])

    @connect.tool(server, provider_arg="provider", providers=PROVIDERS)
    async def whoami_on(
        provider: Annotated[
            str, Field(description='The provider to ask, as configured in mcp-connect (e.g. "github").')
        ],
        connection: Connection,
    ) -> CallToolResult:
        """Tells who you are at a provider, with your own account there. Asks you to connect the account first if needed."""  # noqa: E501
        try:
            async with httpx2.AsyncClient(timeout=10, follow_redirects=False) as http:
                r = await http.get(PROVIDERS[provider], headers=connection.headers())
            me = r.json() if r.is_success else None
        except httpx2.HTTPError:
            return text(f"{provider} could not be reached.", error=True)
        except ValueError:
            return text(f"{provider} answered something that is not JSON.", error=True)
        if me is None:
            return text(f"{provider} refused the request ({r.status_code} {r.reason_phrase}).", error=True)
        me = me if isinstance(me, dict) else {}
        login, id_ = me.get("login", me.get("preferred_username")), me.get("id", me.get("sub"))
        shown = login if isinstance(login, str) else "?"
        message = f"On {provider} you are {shown} (account id {json.dumps(id_, ensure_ascii=False)})."
        return text(message, {"connected": True, "provider": provider, "login": login, "id": id_})

    # The metadata also at the root path, where the Rust example serves it.
    @server.custom_route("/.well-known/oauth-protected-resource", methods=["GET"])
    async def metadata(_: Request) -> JSONResponse:
        return JSONResponse(
            {"resource": RESOURCE, "authorization_servers": [ISSUER], "bearer_methods_supported": ["header"]}
        )

    public = urlsplit(PUBLIC)
    security = TransportSecuritySettings(
        allowed_hosts=[public.netloc, public.hostname or "", LISTEN],
        allowed_origins=[f"{public.scheme}://{public.netloc}"],
    )
    app = server.streamable_http_app(json_response=True, transport_security=security)
    host, port = LISTEN.rsplit(":", 1)
    web = uvicorn.Server(uvicorn.Config(app, host=host.strip("[]"), port=int(port), log_level="warning"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(web.serve)
        while not web.started:
            await anyio.sleep(0.05)
        bound = web.servers[0].sockets[0].getsockname()
        print(f"listening on {host}:{bound[1]}", flush=True)


if __name__ == "__main__":
    anyio.run(main)
