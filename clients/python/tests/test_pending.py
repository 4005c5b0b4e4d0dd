"""The 2025-11-25 memory of handed-out elicitations: per call, taken once, bounded, expiring."""

from __future__ import annotations

from mcp_connect.pending import PendingElicitations


def key(subject: str, session: str = "s1", n: int = 0) -> tuple[str, str, str, bytes]:
    return (session, subject, "whoami_on", n.to_bytes(32, "big"))


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


def test_one_subject_varying_arguments_cannot_push_out_other_subjects() -> None:
    p = PendingElicitations(capacity=40)
    p.remember(key("bob"), "e-bob", 100.0, 0.0)
    for n in range(100):  # free-form arguments: a new call key each time
        p.remember(key("mallory", n=n), f"e-m{n}", 100.0, 0.0)
    assert len(p) == 1 + 32, "mallory keeps at most 32 entries (the per-subject quota)"
    p.remember(key("carol"), "e-carol", 100.0, 0.0)
    assert p.take(key("carol"), 0.0) == "e-carol", "room is left for other subjects"
    assert p.take(key("bob"), 0.0) == "e-bob", "an earlier entry of another subject survives"
    assert p.take(key("mallory", n=67), 0.0) is None, "past the quota, the subject's oldest go"
    assert p.take(key("mallory", n=68), 0.0) == "e-m68"
    assert p.take(key("mallory", n=99), 0.0) == "e-m99"


def test_remembering_a_call_again_makes_it_the_subjects_newest() -> None:
    p = PendingElicitations(per_subject=2)  # the quota is a parameter, 32 by default
    p.remember(key("alice", n=1), "e-1", 100.0, 0.0)
    p.remember(key("alice", n=2), "e-2", 100.0, 0.0)
    p.remember(key("alice", n=1), "e-1b", 100.0, 0.0)
    p.remember(key("alice", n=3), "e-3", 100.0, 0.0)  # n=2 is now the oldest
    assert p.take(key("alice", n=2), 0.0) is None
    assert p.take(key("alice", n=1), 0.0) == "e-1b"
    assert p.take(key("alice", n=3), 0.0) == "e-3"
    assert len(p) == 0
