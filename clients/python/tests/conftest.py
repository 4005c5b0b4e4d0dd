"""Shared test helpers: real HTTP servers on 127.0.0.1 (uvicorn, any free port)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

REPO = Path(__file__).resolve().parents[3]
VECTORS = Path(__file__).resolve().parent / ".." / ".." / "request-state-vectors.json"
OPENAPI = REPO / "openapi.json"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
    """Runs `app` with uvicorn on 127.0.0.1, on a port the OS picks; yields its base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="auto"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


@dataclass
class Seen:
    """One request a canned server received."""

    method: str
    path: str
    raw_path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    at: float


Handler = Callable[[Seen], Awaitable[Response] | Response]
# What a canned server answers to (the proxy takes any method the provider does).
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]


@dataclass
class Canned:
    """A server that answers each request with the next handler of a script (the last one
    repeats), recording what it received."""

    script: list[Handler]
    seen: list[Seen] = field(default_factory=list)

    async def handle(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        raw_path = request.scope.get("raw_path", b"").decode("ascii")
        headers, query = dict(request.headers), dict(request.query_params)
        seen = Seen(request.method, request.url.path, raw_path, query, headers, body, time.monotonic())
        self.seen.append(seen)
        handler = self.script[min(len(self.seen) - 1, len(self.script) - 1)]
        answer = handler(seen)
        return await answer if asyncio.iscoroutine(answer) else answer  # type: ignore[return-value]

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/{path:path}", self.handle, methods=METHODS)])


def json_answer(status: int, body: Any, headers: dict[str, str] | None = None) -> Handler:
    def answer(_: Seen) -> Response:
        return Response(json.dumps(body), status_code=status, media_type="application/json", headers=headers)

    return answer
