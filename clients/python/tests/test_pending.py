"""The 2025-11-25 memory of handed-out elicitations: per call, taken once, bounded, expiring."""

from __future__ import annotations

from mcp_connect.pending import PendingElicitations


def key(subject: str, session: str = "s1") -> tuple[str, str, str, bytes]:
    return (session, subject, "whoami_on", bytes(32))


def test_an_entry_is_taken_once_and_only_by_the_same_call() -> None:
    p = PendingElicitations()
    p.remember(key("alice"), "e-1", 1000.0, 0.0)
    assert p.take(key("bob"), 0.0) is None
    assert p.take(key("alice", session="s2"), 0.0) is None
    assert p.take(key("alice"), 0.0) == "e-1"
    assert p.take(key("alice"), 0.0) is None


def test_an_expired_entry_is_not_returned() -> None:
    p = PendingElicitations()
    p.remember(key("alice"), "e-1", 10.0, 0.0)
    assert p.take(key("alice"), 10.0) is None


def test_when_full_expired_entries_make_room_and_otherwise_nothing_is_remembered() -> None:
    p = PendingElicitations(capacity=2)
    p.remember(key("a"), "e-a", 5.0, 0.0)
    p.remember(key("b"), "e-b", 100.0, 0.0)
    p.remember(key("c"), "e-c", 100.0, 10.0)  # "a" expired by now: dropped to make room
    assert len(p) == 2 and p.take(key("c"), 10.0) == "e-c"
    p.remember(key("d"), "e-d", 100.0, 10.0)
    p.remember(key("e"), "e-e", 100.0, 10.0)  # full of live entries: not remembered
    assert p.take(key("e"), 10.0) is None
    assert len(p) == 2
