"""Slow and greedy clients against ``picobot serve``'s HTTP server (webhooks, admin API).

Real sockets on loopback: the attacking connections come from 127.0.0.2 (Linux routes
all of 127.0.0.0/8 to the loopback interface), the legitimate ones from 127.0.0.1, so the
per-peer cap is seen to apply to the attacker alone.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from picobot.cli.serve import ServeInfo
from tests.channels.raw_clients import Stream, open_from, read_until_closed, status_of, trickling
from tests.channels.webhook.generic_client import signed_headers
from tests.cli.test_serve import ADMIN_KEY, SECRET, serve_while

SLOW_PEER = "127.0.0.2"

HTTP_ENV = {
    "PICOBOT_ADMIN_API_KEYS": ADMIN_KEY,
    "PICOBOT_CHANNELS__WEBHOOK__GENERIC__ENABLED": "true",
    "PICOBOT_CHANNELS__WEBHOOK__GENERIC__CALLBACK_URL": "http://127.0.0.1:9/",
    "PICOBOT_GENERIC_WEBHOOK_SECRET": SECRET,
}


async def post_signed_webhook(http: aiohttp.ClientSession, base: str, message_id: str) -> int:
    """POST one signed generic webhook message; its status."""
    body = json.dumps({"user": "bob", "chat": "c", "text": "hi", "message_id": message_id})
    url = f"{base}/webhooks/generic"
    async with http.post(
        url, data=body.encode(), headers=signed_headers(body.encode(), secret=SECRET)
    ) as r:
        return r.status


def port_of(info: ServeInfo) -> int:
    assert info.http_url is not None
    port = urlsplit(info.http_url).port
    assert port is not None
    return port


async def finish_heads(slow: list[Stream]) -> list[int | None]:
    """Complete the request head of every slow connection; the statuses they get."""
    statuses = []
    for reader, writer in slow:
        try:
            writer.write(b"Connection: close\r\n\r\n")
            await writer.drain()
        except ConnectionError:
            pass  # refused at once: the server may have reset it already
        statuses.append(await status_of(reader))
        writer.close()
    return statuses


async def test_slow_clients_cannot_starve_health_checks_or_signed_webhooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 connections that never finish their request head: one peer holds at most 64
    (the rest are answered 503 and closed), and /healthz and a signed webhook from
    another address are answered meanwhile."""
    seen: dict[str, object] = {}

    async def use(info: ServeInfo, stop: asyncio.Event) -> None:
        port = port_of(info)
        slow = [await open_from(SLOW_PEER, port) for _ in range(200)]
        for _, writer in slow:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the end
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{info.http_url}/healthz") as r:
                seen["healthz"] = r.status
            seen["webhook"] = await post_signed_webhook(http, info.http_url or "", "m-1")
        seen["slow"] = await finish_heads(slow)

    await serve_while(use, monkeypatch, tmp_path, HTTP_ENV)
    assert seen["healthz"] == 200 and seen["webhook"] == 200
    statuses = seen["slow"]
    assert isinstance(statuses, list)
    # The 64 held get their answer once the head is complete; the others were refused
    # (503, or a reset when the unfinished head reached the closed socket).
    assert statuses.count(200) == 64
    assert set(statuses) - {200} <= {503, None}


async def test_connections_past_the_process_cap_are_refused_with_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, object] = {}

    async def use(info: ServeInfo, stop: asyncio.Event) -> None:
        port = port_of(info)
        held = [await open_from(SLOW_PEER, port) for _ in range(10)]
        for _, writer in held:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        reader, writer = await open_from("127.0.0.1", port)
        seen["extra"] = await read_until_closed(reader)
        writer.close()
        seen["held"] = await finish_heads(held)

    env = {
        **HTTP_ENV,
        "PICOBOT_SERVER__MAX_CONNECTIONS": "10",
        "PICOBOT_SERVER__MAX_CONNECTIONS_PER_PEER": "0",
    }
    await serve_while(use, monkeypatch, tmp_path, env)
    extra = seen["extra"]
    assert isinstance(extra, bytes)
    assert extra.startswith(b"HTTP/1.1 503 ") and b"\r\nRetry-After: 1\r\n" in extra
    assert seen["held"] == [200] * 10


HEAD_TRICKLED = (
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
    lambda n: b"X-Slow-%d: 1\r\n" % n,  # a header line every tenth of a second
    "PICOBOT_SERVER__HEADER_TIMEOUT_SECS",
    b"HTTP/1.1 408 Request Timeout\r\n",
)
BODY_TRICKLED = (
    b"POST /webhooks/generic HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\n{",
    lambda n: b" ",  # a byte every tenth of a second, short of the declared length
    "PICOBOT_SERVER__BODY_TIMEOUT_SECS",
    b"",  # dropped mid-request: no answer, above all no 200
)


@pytest.mark.parametrize(
    ("start", "piece", "deadline", "answer"),
    [HEAD_TRICKLED, BODY_TRICKLED],
    ids=["head", "body"],
)
async def test_a_request_trickled_slowly_is_cut_off_at_its_deadline(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    start: bytes,
    piece: Callable[[int], bytes],
    deadline: str,
    answer: bytes,
) -> None:
    """Trickling does not extend the deadline, and a cut-off leaves no error in the log."""
    seen: dict[str, bytes] = {}

    async def use(info: ServeInfo, stop: asyncio.Event) -> None:
        reader, writer = await open_from("127.0.0.1", port_of(info))
        writer.write(start)
        async with trickling(writer, piece):
            seen["answer"] = await read_until_closed(reader)

    await serve_while(use, monkeypatch, tmp_path, {**HTTP_ENV, deadline: "0.5"})
    got = seen["answer"]
    assert got.startswith(answer) if answer else got == b"", got
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "no traceback"


async def test_an_idle_keep_alive_connection_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, object] = {}

    async def use(info: ServeInfo, stop: asyncio.Event) -> None:
        reader, writer = await open_from("127.0.0.1", port_of(info))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        seen["status"] = await status_of(reader)
        seen["rest"] = await read_until_closed(reader)  # the server closes the idle connection
        writer.close()

    env = {**HTTP_ENV, "PICOBOT_SERVER__KEEPALIVE_TIMEOUT_SECS": "0.5"}
    await serve_while(use, monkeypatch, tmp_path, env)
    assert seen["status"] == 200
    rest = seen["rest"]
    assert isinstance(rest, bytes) and rest.endswith(b'"database": "ok"}')
