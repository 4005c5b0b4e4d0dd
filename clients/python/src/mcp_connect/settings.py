"""The settings an MCP server reads from its environment, under the names the docs use and
`mcp-connect dev` writes to its env file (`.mcp-connect-dev.env`). A missing one is an
error that names the variable and where it usually comes from."""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["MissingSettingError", "setting"]

URL = "MCP_CONNECT_URL"
API_KEY = "MCP_CONNECT_API_KEY"
STATE_KEY = "MCP_STATE_KEY"

_WHAT = {
    URL: "mcp-connect's public base URL",
    API_KEY: "a server-scope API key of your tenant (mcpc_…)",
    STATE_KEY: "32 random bytes in standard base64 (`openssl rand -base64 32`), the same on every replica",
}
_WHERE = (
    "`mcp-connect dev` writes it to .mcp-connect-dev.env (load it with `set -a; . ./.mcp-connect-dev.env; set +a`); "
    "in production it comes from your deployment's secrets (docs/mcp-servers.md#settings)"
)


class MissingSettingError(ValueError):
    """A setting read from the environment is not set (or empty); the message names the
    variable, what it is and where it usually comes from."""


def setting(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of `name` in `environ` (default: the process environment), stripped."""
    value = (os.environ if environ is None else environ).get(name, "").strip()
    if not value:
        what = _WHAT.get(name, "a setting")
        raise MissingSettingError(f"{name} is not set: {what}. {_WHERE}")
    return value
