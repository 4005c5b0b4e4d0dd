"""2025-11-25 has no `requestState`: after a `-32042` the client simply repeats the call.
To reconcile that retry with the elicitation it answered (and so not prompt again after a
decline), the server remembers, per MCP session, subject and tool call, the elicitation it
handed out; the next identical call takes it. Bounded and in memory: a 2025-11-25 session
lives in one process anyway.

Bounded twice: `capacity` entries in all, and `per_subject` entries for one subject (past
it, that subject's oldest entry goes). A user varying free-form arguments thus only
pushes out their own entries, never another user's."""

from __future__ import annotations

import threading

__all__ = ["CAPACITY", "PER_SUBJECT", "CallKey", "PendingElicitations"]

CAPACITY = 10_000
# A user waits on a handful of connects at a time; 32 leaves room for many tools.
PER_SUBJECT = 32

# (MCP session id, subject, tool name, digest of the arguments).
CallKey = tuple[str, str, str, bytes]


class PendingElicitations:
    def __init__(self, capacity: int = CAPACITY, per_subject: int = PER_SUBJECT) -> None:
        if capacity < 1 or per_subject < 1:
            raise ValueError("capacity and per_subject are at least 1")
        self._capacity = capacity
        self._per_subject = per_subject
        self._map: dict[CallKey, tuple[str, float]] = {}
        # Each subject's keys, oldest first (dicts keep insertion order).
        self._by_subject: dict[str, dict[CallKey, None]] = {}
        self._lock = threading.Lock()

    def remember(self, key: CallKey, elicitation_id: str, expires_at: float, now: float) -> None:
        """Remembers the elicitation handed out for `key` until `expires_at`. A subject
        at its quota loses its oldest entry. When full even after dropping expired
        entries, remembers nothing: the retry then starts anew."""
        subject = key[1]
        with self._lock:
            if key in self._map:
                self._forget(key)
            else:
                own = self._by_subject.get(subject)
                if own is not None and len(own) >= self._per_subject:
                    self._forget(next(iter(own)))
                if len(self._map) >= self._capacity:
                    for k in [k for k, v in self._map.items() if v[1] <= now]:
                        self._forget(k)
                if len(self._map) >= self._capacity:
                    return
            self._map[key] = (elicitation_id, expires_at)
            self._by_subject.setdefault(subject, {})[key] = None

    def take(self, key: CallKey, now: float) -> str | None:
        """The elicitation of an earlier round of this call, if still current; forgets it."""
        with self._lock:
            entry = self._forget(key)
        if entry is None or entry[1] <= now:
            return None
        return entry[0]

    def _forget(self, key: CallKey) -> tuple[str, float] | None:
        entry = self._map.pop(key, None)
        own = self._by_subject.get(key[1])
        if own is not None:
            own.pop(key, None)
            if not own:
                del self._by_subject[key[1]]
        return entry

    def __len__(self) -> int:
        return len(self._map)
