"""A real aiohttp server on 127.0.0.1:0 that plays scripted HTTP replies.

Tests queue responders (SSE streams, JSON bodies, error statuses, stalls); the server
records every request it receives (path, headers, JSON body) so tests can assert
what the provider actually put on the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from picobot.llm.base import ChatMessage, ToolSpec

Responder = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeLLMServer:
    """Replies with queued responders in order; the last one repeats when the queue ends."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.responders: deque[Responder] = deque()
        self.base_url = ""
        # Set at teardown so a stalled handler ends instead of holding the server open.
        self.release = asyncio.Event()

    def reply(self, *responders: Responder) -> None:
        """Queue responders for the next requests."""
        self.responders.extend(responders)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        self.requests.append(Received(request.method, request.path, dict(request.headers), body))
        if not self.responders:
            return web.json_response({"error": {"message": "no reply queued"}}, status=599)
        responder = self.responders.popleft() if len(self.responders) > 1 else self.responders[0]
        return await responder(request)

    # Responder factories ---------------------------------------------------------

    def sse(
        self,
        events: Sequence[dict[str, Any] | str | tuple[str, dict[str, Any]]],
        *,
        split: int = 0,
        line_end: str = "\n",
        status: int = 200,
    ) -> Responder:
        """Stream events: a dict is ``data: {json}``, a str is sent raw as data, a
        ``(name, dict)`` tuple adds an ``event:`` line. ``split`` > 0 writes the bytes
        in pieces of that size so chunk boundaries fall mid-line and mid-character."""
        parts: list[str] = []
        for item in events:
            name, data = item if isinstance(item, tuple) else ("", item)
            payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
            head = f"event: {name}{line_end}" if name else ""
            parts.append(f"{head}data: {payload}{line_end}{line_end}")
        blob = "".join(parts).encode()

        async def respond(request: web.Request) -> web.StreamResponse:
            resp = web.StreamResponse(status=status, headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            size = split or len(blob) or 1
            for i in range(0, len(blob), size):
                await resp.write(blob[i : i + size])
                if split:
                    await asyncio.sleep(0)
            await resp.write_eof()
            return resp

        return respond

    @staticmethod
    def json_reply(
        data: Any, *, status: int = 200, headers: dict[str, str] | None = None
    ) -> Responder:
        """Reply with a JSON body."""

        async def respond(request: web.Request) -> web.StreamResponse:
            return web.json_response(data, status=status, headers=headers)

        return respond

    @staticmethod
    def raw(
        body: bytes, *, content_type: str = "text/event-stream", status: int = 200
    ) -> Responder:
        """Reply with these exact bytes, for wire formats ``sse`` cannot write."""

        async def respond(request: web.Request) -> web.StreamResponse:
            return web.Response(body=body, status=status, headers={"Content-Type": content_type})

        return respond

    def stall(self, secs: float) -> Responder:
        """Say nothing for ``secs`` seconds (or until teardown), then reply 200 {}."""

        async def respond(request: web.Request) -> web.StreamResponse:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.release.wait(), secs)
            return web.json_response({})

        return respond


@contextlib.asynccontextmanager
async def serving(fake: FakeLLMServer) -> AsyncIterator[FakeLLMServer]:
    """``fake`` listening on 127.0.0.1, any free port; its base_url ends in /v1."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.handle)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    fake.base_url = str(server.make_url("/v1"))
    try:
        yield fake
    finally:
        fake.release.set()
        await server.close()


@pytest.fixture
async def llm_server() -> AsyncIterator[FakeLLMServer]:
    """A FakeLLMServer listening on 127.0.0.1, any free port; base_url ends in /v1."""
    async with serving(FakeLLMServer()) as fake:
        yield fake


# The tool and the prompt both provider test modules send.
WEATHER = ToolSpec(
    "get_weather",
    "Current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
HELLO = [ChatMessage("system", "Be brief."), ChatMessage("user", "Hi there")]
