"""2025-11-25 has no `requestState`: after a `-32042` the client simply repeats the call.
To reconcile that retry with the elicitation it answered (and so not prompt again after a
decline), the server remembers, per MCP session, subject and tool call, the elicitation it
handed out; the next identical call takes it. Bounded and in memory: a 2025-11-25 session
lives in one process anyway."""

from __future__ import annotations

import threading

__all__ = ["CAPACITY", "CallKey", "PendingElicitations"]

CAPACITY = 10_000

# (MCP session id, subject, tool name, digest of the arguments).
CallKey = tuple[str, str, str, bytes]


class PendingElicitations:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._map: dict[CallKey, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def remember(self, key: CallKey, elicitation_id: str, expires_at: float, now: float) -> None:
        """Remembers the elicitation handed out for `key` until `expires_at`. When full
        even after dropping expired entries, remembers nothing: the retry then starts anew."""
        with self._lock:
            if len(self._map) >= self._capacity and key not in self._map:
                self._map = {k: v for k, v in self._map.items() if v[1] > now}
            if len(self._map) < self._capacity or key in self._map:
                self._map[key] = (elicitation_id, expires_at)

    def take(self, key: CallKey, now: float) -> str | None:
        """The elicitation of an earlier round of this call, if still current; forgets it."""
        with self._lock:
            entry = self._map.pop(key, None)
        if entry is None or entry[1] <= now:
            return None
        return entry[0]

    def __len__(self) -> int:
        return len(self._map)
