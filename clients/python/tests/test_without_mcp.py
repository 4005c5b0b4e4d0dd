"""Without the `mcp` extra: the token client, the models, the requestState and the secrets
work, nothing tries to import the MCP SDK, and the adapter's names fail with an
ImportError that says how to install it. Run in a fresh interpreter whose imports of
`mcp` and `mcp_types` fail as they do when the packages are not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

SCRIPT = r"""
import asyncio, importlib.abc, json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

tried = []

class NoMcpSdk(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("mcp", "mcp_types"):
            tried.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoMcpSdk())

import mcp_connect
from mcp_connect import (
    ApiKey, ConnectClient, Connected, RequestState, RequestStateKey, TokenRequest, ToolCall,
)

ANSWER = {"status": "connected", "access_token": "gho_x", "credential_type": "oauth2",
          "token_type": "bearer", "scopes": [], "connection_id": "c"}

class Canned(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        body = json.dumps(ANSWER).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

async def ask(base):
    async with ConnectClient(base, ApiKey("mcpc_k_s")) as client:
        return await client.token(TokenRequest(subject="alice", provider="github"))

http = ThreadingHTTPServer(("127.0.0.1", 0), Canned)
threading.Thread(target=http.serve_forever, daemon=True).start()
outcome = asyncio.run(ask(f"http://127.0.0.1:{http.server_address[1]}"))
http.shutdown()

key = RequestStateKey.generate()
call = ToolCall.of("alice", "whoami_on", {"provider": "github"})
sealed = RequestState("e-1", 4102444800).seal(key, call)
before = list(tried)

refused = {}
for name in ("McpConnect", "Connection", "JwtVerifier", "Replies"):
    try:
        getattr(mcp_connect, name)
    except ImportError as e:
        refused[name] = str(e)
try:
    import mcp_connect.adapter
except ImportError as e:
    refused["mcp_connect.adapter"] = str(e)

print(json.dumps({
    "connected": isinstance(outcome, Connected) and outcome.access_token.reveal() == "gho_x",
    "opened": RequestState.open(sealed, key, call, 0).elicitation_id,
    "tried_before_the_adapter": before,
    "refused": refused,
}))
"""


def test_the_token_client_works_without_the_mcp_sdk_and_the_adapter_names_the_extra() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["connected"] is True
    assert seen["opened"] == "e-1"
    # Neither the package nor the token call so much as tried to import the SDK.
    assert seen["tried_before_the_adapter"] == []
    assert set(seen["refused"]) == {"McpConnect", "Connection", "JwtVerifier", "Replies", "mcp_connect.adapter"}
    for message in seen["refused"].values():
        assert "pip install 'mcp-connect[mcp]'" in message
