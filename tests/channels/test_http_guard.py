""":class:`HttpGuard` on its own, around a real aiohttp app on 127.0.0.1:0, for what the
public routes of ``serve`` cannot show (their answers are small)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from picobot.channels.gate import ConnectionLimits
from picobot.channels.http_guard import HttpGuard, HttpLimits
from tests.channels.raw_clients import open_from, read_until_closed

BIG = 64 * 1024 * 1024  # more than the socket buffers of both ends hold


async def test_a_client_that_stops_reading_its_response_is_dropped() -> None:
    """A response still going out kept its connection open as long as any byte was
    unsent; a client that reads nothing of it for the keep-alive time is dropped."""

    async def big(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * BIG)

    limits = HttpLimits(
        ConnectionLimits(10, 0), header_timeout=10, body_timeout=10, keepalive_timeout=0.3
    )
    guard = HttpGuard(limits)
    app = web.Application(middlewares=[guard.middleware])
    app.router.add_get("/big", big)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await guard.listen(runner, "127.0.0.1", 0)
    try:
        reader, writer = await open_from("127.0.0.1", guard.port)
        writer.write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(300):  # bounded: 30 s at most; reading nothing meanwhile
            if guard.timeouts:
                break
            await asyncio.sleep(0.1)
        assert guard.timeouts == 1
        received = await read_until_closed(reader)
        writer.close()
        assert 0 < len(received) < BIG  # cut off mid-response
    finally:
        guard.close()
        await runner.cleanup()
