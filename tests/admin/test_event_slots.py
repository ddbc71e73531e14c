"""Event stream slots: one key holds at most its share of the streams (others still get
theirs), and a client that never reads gives its slot back once a write to it has
waited past the deadline. The clients that never read are raw sockets with a small
receive buffer that send one request and read nothing, ever."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from picobot.admin.api import AdminAPI
from picobot.config.channels import ServerSettings
from picobot.config.settings import DataSettings, Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.runtime import Runtime, open_runtime
from picobot.store.conversation.events import record_event
from tests.admin.helpers import ALICE, KEY_A, KEY_B

STREAM = "/api/v1/events/stream"
EVENTS = 20_000
"""Events written at once: megabytes of stream, more than any socket buffer holds."""


@dataclass
class Served:
    runtime: Runtime
    admin: AdminAPI
    client: TestClient[Any, Any]

    @property
    def port(self) -> int:
        port = self.client.server.port
        assert port is not None
        return port


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    server = ServerSettings(
        admin_event_streams=8,
        admin_event_streams_per_key=2,
        admin_event_stream_write_timeout_secs=0.5,
    )
    settings = Settings(data=DataSettings(dir=str(tmp_path)), server=server)
    async with open_runtime(settings, provider=ScriptedProvider()) as runtime:
        admin = AdminAPI(runtime, [KEY_A, KEY_B])
        app = web.Application()
        admin.add_routes(app)
        client: TestClient[Any, Any] = TestClient(TestServer(app, host="127.0.0.1", port=0))
        await client.start_server()
        try:
            yield Served(runtime, admin, client)
        finally:
            await client.close()


async def never_reading(port: int, key: str) -> socket.socket:
    """A connection that asks for the stream and then reads nothing."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    request = f"GET {STREAM} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: {key}\r\n\r\n"
    await loop.sock_sendall(sock, request.encode())
    return sock


async def until(condition: Any) -> None:
    """Wait for ``condition()`` (a net of 60 s against a hang, not a timing claim)."""
    async with asyncio.timeout(60):
        while not condition():  # noqa: ASYNC110 - a counter of the server: no event to wait on
            await asyncio.sleep(0.05)


async def test_one_key_holds_its_share_and_a_client_that_never_reads_lets_go(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    events = served.admin.events
    stuck = [await never_reading(served.port, KEY_A) for _ in range(2)]
    try:
        await until(lambda: events.open_streams == 2)
        # The key's share is taken: its next stream is refused, another key's is not.
        async with served.client.get(STREAM, headers={"X-API-Key": KEY_A}) as resp:
            assert resp.status == 429
            assert (await resp.json())["error"]["code"] == "too_many_key_streams"
        async with served.client.get(STREAM, headers={"X-API-Key": KEY_B}) as resp:
            assert resp.status == 200
            assert await resp.content.readline() == b": stream open\n"
        # A burst of events: the writes to the clients that never read stop being taken.
        await served.runtime.db.write(
            lambda c: [
                record_event(c, "memory.saved", 1.0, user_id=ALICE, payload={"memory_id": i})
                for i in range(EVENTS)
            ]
        )
        await until(lambda: events.open_streams == 0)
        async with served.client.get(STREAM, headers={"X-API-Key": KEY_A}) as resp:
            assert resp.status == 200
            assert await resp.content.readline() == b": stream open\n"
    finally:
        for sock in stuck:
            sock.close()
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "took no data for 0.5s; closed" in m]) == 2
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
