"""2025-11-25: `notifications/elicitation/complete`, sent to each session that was handed
an elicitation when mcp-connect says the connect completed.

mcp-connect answers a waiting `GET /v1/elicitations/{id}?wait_seconds=30` when the
elicitation changes, so a watch is a long poll that holds a connection for up to 30 s at a
time. Those polls must never starve the token calls, hence:

- one long poll per elicitation id, whatever the number of sessions waiting on it; its
  outcome goes to every one of them;
- the polls go through their own client (its own connection pool) and at most
  `connections` of them are in flight at once; the others queue for a slot;
- at most `per_subject` sessions-and-elicitations are watched for one subject and `total`
  in all. Past a cap nothing is watched: the client is not told, but its next call still
  gets the account (the call is remembered apart from its watch).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

from .client import ConnectClient
from .errors import ApiError, ConnectError
from .models import ElicitationStatus

__all__ = ["CompletionWatchers"]

logger = logging.getLogger("mcp_connect")

# A notification that cannot be delivered within this long is given up.
NOTIFY_TIMEOUT = 5.0

# (MCP session id, elicitation id).
WatchKey = tuple[str, str]


@dataclass(eq=False)
class _Watch:
    subject: str
    session: Any


@dataclass(eq=False)
class _Poll:
    task: asyncio.Task[None] | None = None
    # The session ids waiting on this elicitation.
    sessions: set[str] = field(default_factory=set)


class CompletionWatchers:
    """The background waits of one `McpConnect`. Not thread-safe: one event loop."""

    def __init__(self, client: ConnectClient, *, connections: int, total: int, per_subject: int) -> None:
        if connections < 1 or total < 0 or per_subject < 0:
            raise ValueError("connections is at least 1; total and per_subject are not negative")
        self._client = client
        self._slots = asyncio.Semaphore(connections)
        self._total = total
        self._per_subject = per_subject
        self._watches: dict[WatchKey, _Watch] = {}
        self._by_subject: dict[str, int] = {}
        self._polls: dict[str, _Poll] = {}
        self._closed = False

    def __len__(self) -> int:
        """The sessions-and-elicitations watched."""
        return len(self._watches)

    @property
    def polls(self) -> int:
        """The elicitations polled (one poll each, however many sessions wait on it)."""
        return len(self._polls)

    def watch(
        self, session: Any, session_id: str, subject: str, elicitation_id: str, expires_at: float
    ) -> _Watch | None:
        """Starts watching `elicitation_id` for `session` until it completes (then the
        session is notified), ends otherwise, expires or `unwatch` is called. Returns the
        watch (to give to `unwatch`), or None when a cap leaves no room."""
        key = (session_id, elicitation_id)
        if self._closed or key in self._watches:
            return None
        if len(self._watches) >= self._total or self._by_subject.get(subject, 0) >= self._per_subject:
            logger.debug("no completion watch: a watch limit is reached")
            return None
        watch = _Watch(subject, session)
        self._watches[key] = watch
        self._by_subject[subject] = self._by_subject.get(subject, 0) + 1
        poll = self._polls.get(elicitation_id)
        if poll is None:
            poll = self._polls[elicitation_id] = _Poll()
            poll.task = asyncio.get_running_loop().create_task(self._run(elicitation_id, expires_at, poll))
        poll.sessions.add(session_id)
        return watch

    def unwatch(self, session_id: str, elicitation_id: str, watch: _Watch | None = None) -> None:
        """The session no longer waits (it ended). The poll stops when no session waits on
        it. With `watch`, only that watch is ended (not a later one of the same key)."""
        key = (session_id, elicitation_id)
        current = self._watches.get(key)
        if current is None or (watch is not None and current is not watch):
            return
        self._drop(key)
        poll = self._polls.get(elicitation_id)
        if poll is not None:
            poll.sessions.discard(session_id)
            if not poll.sessions:
                # Gone at once, so a watch that comes next starts a poll of its own.
                del self._polls[elicitation_id]
                if poll.task is not None:
                    poll.task.cancel()

    async def aclose(self) -> None:
        self._closed = True
        tasks = [p.task for p in self._polls.values() if p.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _drop(self, key: WatchKey) -> None:
        watch = self._watches.pop(key, None)
        if watch is None:
            return
        left = self._by_subject.get(watch.subject, 0) - 1
        if left > 0:
            self._by_subject[watch.subject] = left
        else:
            self._by_subject.pop(watch.subject, None)

    async def _run(self, elicitation_id: str, expires_at: float, poll: _Poll) -> None:
        try:
            if await self._completed(elicitation_id, expires_at):
                await self._notify(elicitation_id, poll)
        finally:
            if self._polls.get(elicitation_id) is poll:
                del self._polls[elicitation_id]
            for session_id in poll.sessions:
                self._drop((session_id, elicitation_id))
            poll.sessions.clear()

    async def _completed(self, elicitation_id: str, expires_at: float) -> bool:
        """Whether the elicitation completed before it expired (or failed, ended otherwise)."""
        while expires_at - time.time() > 0:
            started = time.monotonic()
            try:
                async with self._slots:
                    # Computed once a slot is ours: the wait for it may have been long.
                    wait = max(1, min(30, math.ceil(expires_at - time.time())))
                    info = await self._client.elicitation(elicitation_id, wait_seconds=wait)
            except ApiError as e:
                logger.info("stopped waiting for an elicitation (%s)", e.code)
                return False
            except ConnectError:
                await asyncio.sleep(5)
                continue
            if info.status == ElicitationStatus.COMPLETED:
                return True
            if info.status != ElicitationStatus.PENDING:
                return False
            # A service that does not hold the answer must not be polled in a tight loop.
            if time.monotonic() - started < 1:
                await asyncio.sleep(2)
        return False

    async def _notify(self, elicitation_id: str, poll: _Poll) -> None:
        sessions = [w.session for s in list(poll.sessions) if (w := self._watches.get((s, elicitation_id)))]
        for session in sessions:
            try:
                async with asyncio.timeout(NOTIFY_TIMEOUT):
                    await session.send_elicit_complete(elicitation_id)
            except Exception as e:  # noqa: BLE001 - the session may be gone; nothing to tell
                logger.debug("elicitation/complete not delivered (%s)", type(e).__name__)
