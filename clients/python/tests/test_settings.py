"""Settings read from the environment: a missing one names its variable and where it
comes from (issue 41: the TypeScript SDK's `ApiKey needs a non-empty string` named none)."""

from __future__ import annotations

import base64

import pytest

from mcp_connect import ConnectClient, MissingSettingError

KEY = "mcpc_0123456789abcdef_" + "x" * 43
STATE = base64.b64encode(bytes(32)).decode()
pytestmark = pytest.mark.anyio

ALL = {"MCP_CONNECT_URL": "http://127.0.0.1:8080", "MCP_CONNECT_API_KEY": KEY, "MCP_STATE_KEY": STATE}


@pytest.mark.parametrize("missing", ["MCP_CONNECT_URL", "MCP_CONNECT_API_KEY"])
async def test_a_client_from_the_environment_names_the_variable_it_misses(missing: str) -> None:
    for value in (None, "", "  "):
        env = {k: v for k, v in ALL.items() if k != missing}
        if value is not None:
            env[missing] = value
        with pytest.raises(MissingSettingError) as e:
            ConnectClient.from_env(env)
        assert str(e.value).startswith(f"{missing} is not set: ")
        assert ".mcp-connect-dev.env" in str(e.value)
        assert KEY not in str(e.value)


async def test_a_client_from_the_environment_uses_the_names_the_dev_env_file_writes() -> None:
    async with ConnectClient.from_env(ALL) as client:
        assert client._base == "http://127.0.0.1:8080"
        assert client._key.reveal() == KEY


@pytest.mark.parametrize("missing", ["MCP_CONNECT_URL", "MCP_CONNECT_API_KEY", "MCP_STATE_KEY"])
async def test_mcp_connect_from_the_environment_names_the_variable_it_misses(missing: str) -> None:
    pytest.importorskip("mcp")
    from mcp_connect import McpConnect

    env = {k: v for k, v in ALL.items() if k != missing}
    with pytest.raises(MissingSettingError, match=f"^{missing} is not set: "):
        McpConnect.from_env(env)
