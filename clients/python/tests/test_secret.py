"""Secrets never print: not in repr/str/format, not in logs, not in JSON, not to inspect."""

from __future__ import annotations

import inspect
import json
import logging
import pickle
import traceback
from datetime import UTC, datetime

import pytest

from mcp_connect import AccessToken, ApiKey, ConnectClient, Connected, Connection, WorkloadToken
from mcp_connect.models import parse_token_answer

SECRET = "gho_supersecretvalue"


@pytest.mark.parametrize("kind", [ApiKey, AccessToken, WorkloadToken])
def test_printing_a_secret_shows_a_placeholder(kind: type[ApiKey] | type[AccessToken] | type[WorkloadToken]) -> None:
    s = kind(SECRET)
    # Every way Python turns a value into text, the old ones too.
    shown = [repr(s), str(s), f"{s}", f"{s!r}", f"{s:>40}", "%s" % s, "{}".format(s), repr([s]), repr({"k": s})]  # noqa: UP031, UP032
    assert all(SECRET not in x for x in shown)
    assert repr(s) == f"{kind.__name__}([REDACTED])"
    assert s.reveal() == SECRET


def test_a_secret_is_hidden_from_inspection_json_and_pickle() -> None:
    s = AccessToken(SECRET)
    members = inspect.getmembers(s)
    assert SECRET not in repr(members)
    assert not hasattr(s, "__dict__")
    with pytest.raises(TypeError):
        json.dumps({"token": s})
    with pytest.raises(TypeError):
        pickle.dumps(s)
    with pytest.raises(AttributeError):
        s._get = lambda: "x"  # type: ignore[misc]


def test_logging_a_secret_logs_the_placeholder(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        logging.getLogger("t").info("token %s key %r", AccessToken(SECRET), ApiKey(SECRET))
    assert SECRET not in caplog.text and "[REDACTED]" in caplog.text


def test_a_connected_answer_never_prints_or_dumps_the_token() -> None:
    body = json.dumps(
        {
            "status": "connected",
            "access_token": SECRET,
            "credential_type": "oauth2",
            "token_type": "bearer",
            "scopes": [],
            "connection_id": "c",
        }
    ).encode()
    outcome = parse_token_answer(body)
    assert isinstance(outcome, Connected)
    assert SECRET not in repr(outcome) and SECRET not in str(outcome)
    assert SECRET not in outcome.model_dump_json() and "[REDACTED]" in outcome.model_dump_json()
    assert outcome.access_token.reveal() == SECRET
    conn = Connection("dev", "alice", outcome.access_token, "bearer", (), datetime.now(UTC), None, "c")
    assert SECRET not in repr(conn)
    assert conn.headers() == {"Authorization": f"Bearer {SECRET}"}


def test_a_typed_credentials_fields_are_redacted_too() -> None:
    body = json.dumps(
        {
            "status": "connected",
            "access_token": SECRET,
            "credential_type": "basic",
            "fields": {"username": "ann", "password": SECRET},
            "token_type": "basic",
            "scopes": [],
            "connection_id": "c",
        }
    ).encode()
    outcome = parse_token_answer(body)
    assert isinstance(outcome, Connected) and outcome.credential_type == "basic"
    assert SECRET not in repr(outcome) and SECRET not in outcome.model_dump_json()
    assert outcome.fields is not None and outcome.fields["password"].reveal() == SECRET
    assert outcome.fields["username"].reveal() == "ann"


def test_the_client_does_not_print_its_key_nor_put_it_in_errors() -> None:
    client = ConnectClient("https://connect.example", SECRET)
    assert SECRET not in repr(client)
    try:
        client._id("not an id")
    except ValueError:
        assert SECRET not in traceback.format_exc()
