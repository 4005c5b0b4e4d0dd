"""A real MCP client (the `mcp` Python SDK) driven line by line by a Rust test.

The Rust test starts the IdP, the provider, mcp-connect and the example MCP server, then
runs this script and talks to it over stdin/stdout, one JSON object per line:

  -> {"cmd": "connect", "url": ..., "token": ..., "mode": "legacy" | "2026-07-28", "url_elicitation": true}
  <- {"ok": true, "protocol_version": "..."}
  -> {"cmd": "call", "name": ..., "arguments": {...}}
  <- {"event": "elicit", "params": {...}}          when the client must show a URL
  -> {"answer": "accept" | "decline" | "cancel"}   what the user chose (the test acts as the user)
  <- {"result": {...}} | {"error": {...}} | {"not_retried": {...}}
  -> {"cmd": "call_once", "name", "arguments", "request_state", "input_responses"}
  <- {"result": {...}} | {"input_required": {...}} | {"error": {...}}
  -> {"cmd": "close"}

`call` is what an MCP host does: on 2026-07-28 the SDK's own input_required driver runs
the elicitation callback and retries; on 2025-11-25 the SDK raises the -32042 error and the
host (this script) shows each URL and repeats the call after `accept`. `call_once` drives
a single round by hand (for tampered or foreign requestState).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, MCPError, UrlElicitationRequiredError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

MAX_LEGACY_ROUNDS = 5


def send(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def receive() -> dict[str, Any]:
    line = await anyio.to_thread.run_sync(sys.stdin.readline)
    if not line:
        raise SystemExit("stdin closed")
    return json.loads(line)


def dump(model: Any) -> Any:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


async def ask_user(params: dict[str, Any]) -> str:
    """The host shows the URL and asks the user; the Rust test answers for the user."""
    send({"event": "elicit", "params": params})
    answer = (await receive())["answer"]
    if answer not in ("accept", "decline", "cancel"):
        raise SystemExit(f"bad answer {answer!r}")
    return answer


async def elicitation_callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    action = await ask_user(dump(params))
    return types.ElicitResult(action=action)


def error_of(e: MCPError) -> dict[str, Any]:
    return {"code": e.code, "message": e.message, "data": e.data}


async def call_legacy(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """2025-11-25: the SDK surfaces -32042 as an error; the host shows the URLs and retries."""
    rounds = []
    for _ in range(MAX_LEGACY_ROUNDS):
        try:
            result = await client.call_tool(name, arguments)
            return {"result": dump(result), "rounds": rounds}
        except MCPError as e:
            if e.code != types.URL_ELICITATION_REQUIRED:
                return {"error": error_of(e), "rounds": rounds}
            required = UrlElicitationRequiredError.from_error(e.error)
            actions = []
            for elicitation in required.elicitations:
                actions.append(await ask_user(dump(elicitation)))
            rounds.append({"error": error_of(e), "actions": actions})
            if any(a != "accept" for a in actions):
                return {"not_retried": {"actions": actions}, "rounds": rounds}
    return {"error": {"code": 0, "message": "too many rounds"}, "rounds": rounds}


async def main() -> None:
    cmd = await receive()
    assert cmd["cmd"] == "connect", cmd
    headers = {"Authorization": f"Bearer {cmd['token']}"}
    http_client = create_mcp_http_client(headers=headers)
    if os.environ.get("MCP_WIRE_LOG"):
        # Debugging aid: every request body and response status on stderr (never stdout).
        async def log_request(request: Any) -> None:
            version = request.headers.get("mcp-protocol-version")
            print(f">> {request.method} {version} {request.content.decode(errors='replace')}", file=sys.stderr)

        async def log_response(response: Any) -> None:
            print(f"<< {response.status_code} {response.headers.get('content-type')}", file=sys.stderr)

        http_client.event_hooks = {"request": [log_request], "response": [log_response]}
    transport = streamable_http_client(cmd["url"], http_client=http_client)
    legacy = cmd["mode"] == "legacy"
    client = Client(
        transport,
        mode=cmd["mode"],
        # The SDK declares elicitation {form, url} exactly when a callback is given.
        elicitation_callback=elicitation_callback if cmd["url_elicitation"] else None,
        read_timeout_seconds=30,
    )
    async with client:
        send({"ok": True, "protocol_version": client.protocol_version})
        while True:
            cmd = await receive()
            if cmd["cmd"] == "close":
                send({"ok": True})
                return
            if cmd["cmd"] == "list_tools":
                send({"result": dump(await client.list_tools())})
            elif cmd["cmd"] == "call":
                if legacy:
                    send(await call_legacy(client, cmd["name"], cmd.get("arguments")))
                    continue
                try:
                    send({"result": dump(await client.call_tool(cmd["name"], cmd.get("arguments")))})
                except MCPError as e:
                    send({"error": error_of(e)})
            elif cmd["cmd"] == "call_once":
                responses = cmd.get("input_responses")
                try:
                    result = await client.session.call_tool(
                        cmd["name"],
                        cmd.get("arguments"),
                        input_responses=(
                            {k: types.ElicitResult.model_validate(v) for k, v in responses.items()}
                            if responses is not None
                            else None
                        ),
                        request_state=cmd.get("request_state"),
                        allow_input_required=True,
                    )
                except MCPError as e:
                    send({"error": error_of(e)})
                    continue
                if isinstance(result, types.InputRequiredResult):
                    send({"input_required": dump(result)})
                else:
                    send({"result": dump(result)})
            else:
                raise SystemExit(f"unknown command {cmd!r}")


if __name__ == "__main__":
    anyio.run(main)
