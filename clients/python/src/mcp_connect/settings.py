"""The settings an MCP server reads from its environment, under the names the docs use and
`mcp-connect dev` writes to its env file (`.mcp-connect-dev.env`). A missing one is an
error that names the variable and where it usually comes from."""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["MissingSettingError", "key_or_token_file", "setting"]

URL = "MCP_CONNECT_URL"
API_KEY = "MCP_CONNECT_API_KEY"
STATE_KEY = "MCP_STATE_KEY"
# In the API key's place: the file of a workload token (docs/workload-identity.md).
TOKEN_FILE = "MCP_CONNECT_TOKEN_FILE"

_WHAT = {
    URL: "mcp-connect's public base URL",
    API_KEY: "a server-scope API key of your tenant (mcpc_…)",
    TOKEN_FILE: "the file of a workload token, e.g. a Kubernetes projected service-account token",
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


def key_or_token_file(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """`(API_KEY, key)` when `MCP_CONNECT_API_KEY` is set, else `(TOKEN_FILE, path)` when
    `MCP_CONNECT_TOKEN_FILE` is; with neither, a `MissingSettingError` naming both."""
    env = os.environ if environ is None else environ
    for name in (API_KEY, TOKEN_FILE):
        value = env.get(name, "").strip()
        if value:
            return name, value
    raise MissingSettingError(
        f"{API_KEY} is not set: {_WHAT[API_KEY]}; or, to present a workload token instead of a key, "
        f"set {TOKEN_FILE} to {_WHAT[TOKEN_FILE]} (docs/workload-identity.md). {_WHERE}"
    )
