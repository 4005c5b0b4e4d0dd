"""Workload identity (issue 44): a token source in the API key's place. A token file is read
again when it is replaced (as the kubelet rotates a projected token), a token function is
called for each request, each request carries the token as it is when it leaves (asserted
on what a real local HTTP server received), and neither the source nor the token prints."""

from __future__ import annotations

import functools
import inspect
import logging
import os
import pickle
import traceback
from pathlib import Path
from unittest import mock

import pytest
from conftest import Canned, json_answer, serve

import mcp_connect.token_source as token_source
from mcp_connect import (
    ConnectClient,
    Connected,
    ConnectError,
    MissingSettingError,
    TokenFile,
    TokenRequest,
    WorkloadToken,
    WorkloadTokenError,
)

pytestmark = pytest.mark.anyio

# Shaped as the JWTs a platform hands out; the server tells them from an API key by shape.
FIRST = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJmaXJzdCJ9.c2lnbmF0dXJlLWZpcnN0"
SECOND = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJzZWNvbmQifQ.c2lnbmF0dXJlLXNlY29uZA"
CONNECTED = {
    "status": "connected",
    "access_token": "gho_tokensecret",
    "credential_type": "oauth2",
    "token_type": "bearer",
    "scopes": [],
    "connection_id": "7e0f1c2d-3b4a-4c5d-8e9f-0a1b2c3d4e5f",
}
ALICE = TokenRequest(subject="alice", provider="github")


def kubelet_volume(root: Path, token: str) -> Path:
    """A projected volume as the kubelet lays it out: `token -> ..data/token`, `..data` a
    symlink to a timestamped directory. Returns the path the workload reads."""
    first = root / "..2026_01_01_00_00_00.000000001"
    first.mkdir()
    (first / "token").write_text(token + "\n")
    (root / "..data").symlink_to(first.name)
    (root / "token").symlink_to("..data/token")
    return root / "token"


def kubelet_rotate(root: Path, token: str, n: int) -> None:
    """The kubelet's atomic update: a new timestamped directory, then `..data` swapped to it
    by renaming a new symlink over the old one; the old directory goes."""
    old = os.readlink(root / "..data")
    new = root / f"..2026_01_01_00_00_0{n}.000000001"
    new.mkdir()
    (new / "token").write_text(token + "\n")
    (root / "..data_tmp").symlink_to(new.name)
    os.replace(root / "..data_tmp", root / "..data")
    for f in (root / old).iterdir():
        f.unlink()
    (root / old).rmdir()


def replace_file(path: Path, token: str) -> None:
    """A new file moved into place (`os.replace`, a rename over the old one)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(token)
    os.replace(tmp, path)


@pytest.mark.parametrize("rotation", ["kubelet symlink swap", "os.replace"])
async def test_a_replaced_token_file_is_read_again_and_the_next_request_carries_the_new_token(
    tmp_path: Path, rotation: str
) -> None:
    if rotation == "os.replace":
        path = tmp_path / "token"
        path.write_text(f"  {FIRST}\n")
    else:
        path = kubelet_volume(tmp_path, FIRST)
    source = TokenFile(path)
    canned = Canned([json_answer(200, CONNECTED)])
    async with serve(canned.app()) as base, ConnectClient(base, source) as client:
        assert isinstance(await client.token(ALICE), Connected)
        await client.token(ALICE)
        if rotation == "os.replace":
            replace_file(path, SECOND)
        else:
            kubelet_rotate(tmp_path, SECOND, 1)
        await client.token(ALICE)
        await client.token(ALICE)
    assert [s.headers["authorization"] for s in canned.seen] == [
        f"Bearer {FIRST}",
        f"Bearer {FIRST}",
        f"Bearer {SECOND}",
        f"Bearer {SECOND}",
    ]


def test_an_unchanged_token_file_is_not_read_again(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(FIRST)
    source = TokenFile(str(path))
    with mock.patch.object(token_source, "open", create=True, wraps=open) as opened:
        assert [source().reveal() for _ in range(5)] == [FIRST] * 5
        assert opened.call_count == 1, "one read; each later call only stats the file"
        replace_file(path, SECOND)
        assert source().reveal() == SECOND
        assert opened.call_count == 2


async def test_the_clients_own_pool_and_its_proxied_calls_carry_the_same_source(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(FIRST)
    source = TokenFile(path)
    canned = Canned([json_answer(200, CONNECTED)])
    async with serve(canned.app()) as base, ConnectClient(base, source) as client:
        own = client.with_own_pool(2)
        try:
            assert own._key is source
            await own.token(ALICE)
            async with client.proxied("github", subject="alice") as http:
                await http.get("/user")
                replace_file(path, SECOND)
                await http.get("/user")
            await own.token(ALICE)
        finally:
            await own.aclose()
    assert [(s.path, s.headers["authorization"]) for s in canned.seen] == [
        ("/v1/token", f"Bearer {FIRST}"),
        ("/v1/proxy/github/user", f"Bearer {FIRST}"),
        ("/v1/proxy/github/user", f"Bearer {SECOND}"),
        ("/v1/token", f"Bearer {SECOND}"),
    ]


async def test_a_token_function_is_called_for_each_request_and_each_retry() -> None:
    calls: list[int] = []

    def current() -> str:
        calls.append(1)
        return f"{FIRST}-{len(calls)}"

    busy = json_answer(503, {"error": "temporarily_unavailable", "error_description": ""}, {"Retry-After": "0"})
    canned = Canned([json_answer(200, CONNECTED), busy, json_answer(200, CONNECTED)])
    async with serve(canned.app()) as base, ConnectClient(base, current) as client:
        await client.token(ALICE)
        await client.token(ALICE)
    assert len(calls) == 3, "the first request, then the second and its retry"
    assert [s.headers["authorization"] for s in canned.seen] == [f"Bearer {FIRST}-{n}" for n in (1, 2, 3)]


async def test_an_async_token_function_is_awaited_for_each_request() -> None:
    tokens = iter([FIRST, SECOND])

    async def current() -> str:
        return next(tokens)

    canned = Canned([json_answer(200, CONNECTED)])
    async with serve(canned.app()) as base, ConnectClient(base, current) as client:
        await client.token(ALICE)
        await client.token(ALICE)
    assert [s.headers["authorization"] for s in canned.seen] == [f"Bearer {FIRST}", f"Bearer {SECOND}"]


def _unreadable(tmp_path: Path, case: str) -> Path:
    path = tmp_path / "token"
    if case == "missing":
        return path
    if case == "a directory":
        path.mkdir()
    elif case == "empty":
        path.write_text(" \n\t\n")
    elif case == "two words":
        path.write_text(f"{FIRST} {SECOND}")
    elif case == "binary":
        path.write_bytes(FIRST.encode() + b"\xff\xfe")
    elif case == "too large":
        path.write_text(FIRST * 2000)
    return path


CASES = {
    "missing": "cannot read the token file {path}: No such file or directory",
    "a directory": "cannot read the token file {path}: Is a directory",
    "empty": "the token file {path} is empty",
    "two words": "the token file {path} holds no token (a token is one line of visible ASCII, without spaces)",
    "binary": "the token file {path} holds no token (it is not ASCII text)",
    "too large": "the token file {path} is larger than 64 KiB: it holds no token",
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_token_file_without_a_token_is_a_clear_error_without_the_token_and_nothing_is_sent(
    tmp_path: Path, case: str
) -> None:
    path = _unreadable(tmp_path, case)
    canned = Canned([json_answer(200, CONNECTED)])
    async with serve(canned.app()) as base, ConnectClient(base, TokenFile(path)) as client:
        with pytest.raises(WorkloadTokenError) as e:
            await client.token(ALICE)
    assert str(e.value) == CASES[case].format(path=path)
    assert isinstance(e.value, ConnectError) and e.value.code is None
    shown = str(e.value) + repr(e.value) + "".join(traceback.format_exception(e.value))
    assert "eyJ" not in shown and "c2ln" not in shown
    assert canned.seen == [], "nothing was sent"


def test_a_token_file_that_turns_empty_is_an_error_not_the_old_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(FIRST)
    source = TokenFile(path)
    assert source().reveal() == FIRST
    replace_file(path, "\n")
    with pytest.raises(WorkloadTokenError, match="is empty") as e:
        source()
    assert FIRST not in str(e.value)
    replace_file(path, SECOND)
    assert source().reveal() == SECOND, "the next good file is read"


def _raises() -> str:
    raise RuntimeError(f"the platform's agent is down (last token {FIRST})")


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (_raises, "the token function raised RuntimeError"),
        (lambda: "  ", "the token function returned an empty token"),
        (lambda: None, "the token function returned a NoneType, not the token (a str)"),
        (
            lambda: f"{FIRST}\nx",
            "the token function holds no token (a token is one line of visible ASCII, without spaces)",
        ),
    ],
)
async def test_a_token_function_that_gives_no_token_is_a_clear_error_and_nothing_is_sent(
    function: object, message: str
) -> None:
    canned = Canned([json_answer(200, CONNECTED)])
    async with serve(canned.app()) as base, ConnectClient(base, function) as client:  # type: ignore[arg-type]
        with pytest.raises(WorkloadTokenError) as e:
            await client.token(ALICE)
    assert str(e.value) == message
    assert FIRST not in str(e.value) and FIRST not in repr(e.value)
    assert canned.seen == []
    if function is _raises:
        assert isinstance(e.value.__cause__, RuntimeError), "the function's own error is kept as the cause"


def test_what_is_neither_a_key_nor_a_token_source_is_refused() -> None:
    for wrong in (None, 42, b"mcpc_x_y", WorkloadToken(FIRST)):
        with pytest.raises(TypeError, match="TokenFile"):
            ConnectClient("https://connect.example", wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        TokenFile("")


def test_a_token_source_and_its_token_never_print(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "token"
    path.write_text(FIRST)
    source = TokenFile(path)
    token = source()
    assert isinstance(token, WorkloadToken) and token.reveal() == FIRST
    assert repr(token) == str(token) == f"{token}" == "WorkloadToken([REDACTED])"
    assert repr(source) == str(source) == f"TokenFile({str(path)!r})"
    assert source.path == str(path)
    assert FIRST not in repr(inspect.getmembers(source))
    assert not hasattr(source, "__dict__")
    assert FIRST.encode() not in pickle.dumps(source), "a copy reads the file itself"
    with pytest.raises(TypeError):
        pickle.dumps(token)
    # A function's arguments may be the token: only its name is shown.
    partial = functools.partial(str, FIRST)
    clients = [ConnectClient("https://connect.example", s) for s in (source, partial, lambda: FIRST)]
    shown = [repr(c) for c in clients]
    assert shown == [
        f"ConnectClient('https://connect.example', TokenFile({str(path)!r}))",
        "ConnectClient('https://connect.example', <token function partial>)",
        "ConnectClient('https://connect.example', <token function "
        "test_a_token_source_and_its_token_never_print.<locals>.<lambda>>)",
    ]
    with caplog.at_level(logging.INFO):
        logging.getLogger("t").info("source %s token %s %r client %r", source, token, token, clients[0])
    assert FIRST not in caplog.text and "[REDACTED]" in caplog.text


# --- From the environment ---------------------------------------------------------------

URL = "http://127.0.0.1:8080"
KEY = "mcpc_0123456789abcdef_" + "x" * 43


async def test_from_env_takes_the_token_file_where_no_key_is_set(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(FIRST)
    for env in (
        {"MCP_CONNECT_URL": URL, "MCP_CONNECT_TOKEN_FILE": str(path)},
        {"MCP_CONNECT_URL": URL, "MCP_CONNECT_API_KEY": " ", "MCP_CONNECT_TOKEN_FILE": f" {path} "},
    ):
        async with ConnectClient.from_env(env) as client:
            assert isinstance(client._key, TokenFile) and client._key.path == str(path)
            assert client._key().reveal() == FIRST
    async with ConnectClient.from_env(
        {"MCP_CONNECT_URL": URL, "MCP_CONNECT_API_KEY": KEY, "MCP_CONNECT_TOKEN_FILE": str(path)}
    ) as client:
        assert client._key.reveal() == KEY, "a key, when set, is what is used"  # type: ignore[union-attr]


async def test_from_env_without_a_key_or_a_token_file_names_both() -> None:
    for env in (
        {"MCP_CONNECT_URL": URL},
        {"MCP_CONNECT_URL": URL, "MCP_CONNECT_API_KEY": "", "MCP_CONNECT_TOKEN_FILE": " "},
    ):
        with pytest.raises(MissingSettingError) as e:
            ConnectClient.from_env(env)
        assert str(e.value).startswith("MCP_CONNECT_API_KEY is not set: ")
        assert "MCP_CONNECT_TOKEN_FILE" in str(e.value) and ".mcp-connect-dev.env" in str(e.value)


async def test_mcp_connect_takes_a_token_source_from_the_environment_or_as_its_key(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    import base64

    from mcp_connect import McpConnect

    path = tmp_path / "token"
    path.write_text(FIRST)
    state = base64.b64encode(bytes(32)).decode()
    env = {"MCP_CONNECT_URL": URL, "MCP_CONNECT_TOKEN_FILE": str(path), "MCP_STATE_KEY": state}
    from_env = McpConnect.from_env(env)
    source = TokenFile(path)
    given = McpConnect(URL, source, state)
    try:
        assert isinstance(from_env.client._key, TokenFile) and from_env.client._key.path == str(path)
        assert from_env.watch_client._key is from_env.client._key, "the completion watchers' client shares it"
        assert given.client._key is source and given.watch_client._key is source
        assert FIRST not in repr(from_env) and FIRST not in repr(given)
    finally:
        await from_env.aclose()
        await given.aclose()
    with pytest.raises(MissingSettingError, match="MCP_CONNECT_TOKEN_FILE"):
        McpConnect.from_env({"MCP_CONNECT_URL": URL, "MCP_STATE_KEY": state})
