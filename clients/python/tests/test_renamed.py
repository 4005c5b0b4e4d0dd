"""The earlier names still import, as the same objects as the new ones, with a
DeprecationWarning; unknown names are still AttributeErrors."""

from __future__ import annotations

import importlib

import pytest

import mcp_connect

RENAMED = [
    ("mcp_connect", "McpConnectClient", "ConnectClient"),
    ("mcp_connect", "McpConnectError", "ConnectError"),
    ("mcp_connect", "Unavailable", "UnavailableError"),
    ("mcp_connect", "InvalidResponse", "InvalidResponseError"),
    ("mcp_connect", "UnsealableCall", "CanonicalizationError"),
    ("mcp_connect.client", "McpConnectClient", "ConnectClient"),
    ("mcp_connect.errors", "McpConnectError", "ConnectError"),
    ("mcp_connect.errors", "Unavailable", "UnavailableError"),
    ("mcp_connect.errors", "InvalidResponse", "InvalidResponseError"),
    ("mcp_connect.request_state", "UnsealableCall", "CanonicalizationError"),
]


@pytest.mark.parametrize(("module", "old", "new"), RENAMED)
def test_an_earlier_name_is_the_new_object_with_a_warning(module: str, old: str, new: str) -> None:
    m = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{module}.{old} is now {module}.{new}"):
        value = getattr(m, old)
    assert value is getattr(m, new)
    assert old not in getattr(m, "__all__", ())


def test_from_import_of_an_earlier_name_warns_at_the_importer() -> None:
    with pytest.warns(DeprecationWarning) as seen:
        from mcp_connect import Unavailable  # noqa: F401
    assert seen[0].filename == __file__


def test_every_name_in_all_is_there() -> None:
    for name in mcp_connect.__all__:
        assert getattr(mcp_connect, name) is not None
    assert set(mcp_connect.__all__) <= set(dir(mcp_connect))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchThing'"):
        mcp_connect.NoSuchThing  # noqa: B018
