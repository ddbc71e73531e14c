"""The WebSocket channel's connection caps, handshake deadline and escaped log lines,
against a real server on loopback. Attacking connections come from 127.0.0.2 (all of
127.0.0.0/8 is loopback on Linux), the legitimate client from 127.0.0.1."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from websockets.exceptions import InvalidStatus

from tests.channels.raw_clients import open_from, read_until_closed, trickling
from tests.channels.websocket.test_server import KEY_A, start

OTHER_PEER = "127.0.0.2"


async def test_a_peer_past_its_cap_is_refused_while_others_still_connect(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    server = await start(stack, tmp_path, max_connections_per_peer=2)
    held = [await open_from(OTHER_PEER, server.channel.port) for _ in range(2)]
    reader, writer = await open_from(OTHER_PEER, server.channel.port)
    refused = await read_until_closed(reader)
    writer.close()
    assert refused.startswith(b"HTTP/1.1 503 ") and b"\r\nRetry-After: 1\r\n" in refused
    ws, hello = await server.client(KEY_A)  # from 127.0.0.1: its own allowance
    assert hello["type"] == "hello"
    await ws.close()
    for _, w in held:
        w.close()


async def test_connections_past_the_channel_cap_are_refused(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    server = await start(stack, tmp_path, max_connections=2, max_connections_per_peer=0)
    held = [await open_from(OTHER_PEER, server.channel.port) for _ in range(2)]
    reader, writer = await open_from("127.0.0.1", server.channel.port)
    refused = await read_until_closed(reader)
    writer.close()
    assert refused.startswith(b"HTTP/1.1 503 ")
    for _, w in held:
        w.close()


async def test_a_handshake_trickled_slowly_is_closed(stack: AsyncExitStack, tmp_path: Path) -> None:
    server = await start(stack, tmp_path, handshake_timeout_secs=0.5)
    reader, writer = await open_from("127.0.0.1", server.channel.port)
    writer.write(b"GET /ws HTTP/1.1\r\nHost: x\r\n")
    async with trickling(writer, lambda n: b"X-Slow-%d: 1\r\n" % n):
        answer = await read_until_closed(reader)
    assert b" 101 " not in answer  # closed, never upgraded


async def test_a_forged_log_line_in_the_user_agent_stays_on_its_own_line(
    stack: AsyncExitStack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = await start(stack, tmp_path)
    reader, writer = await open_from("127.0.0.1", server.channel.port)
    # NEL (0x85) ends a line for str.splitlines() and many log viewers.
    writer.write(
        b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        b"User-Agent: probe\x85INFO picobot: purge executed: FORGED\r\n"
        b"X-API-Key: wrong-key-0123456789\r\n\r\n"
    )
    with caplog.at_level(logging.INFO, logger="picobot.channels.websocket.server"):
        answer = await read_until_closed(reader)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 401 ")
    refused = [r.getMessage() for r in caplog.records if "FORGED" in r.getMessage()]
    assert len(refused) == 1 and refused[0].splitlines() == [refused[0]]
    assert "probe\\x85INFO picobot: purge executed: FORGED" in refused[0]


async def test_wrong_keys_from_one_peer_leave_two_log_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="picobot.channels.websocket.server"):
        async with AsyncExitStack() as stack:
            server = await start(stack, tmp_path)
            for _ in range(50):
                with pytest.raises(InvalidStatus):
                    await server.client("wrong-key-0123456789")
    refused = [
        r.getMessage()
        for r in caplog.records
        if r.name == "picobot.channels.websocket.server" and "refused" in r.getMessage()
    ]
    assert len(refused) == 2, refused
    assert refused[0].startswith("WebSocket refused 127.0.0.1:")
    assert refused[1] == "WebSocket: refused handshakes: 49 more from 127.0.0.1 in the last 60s"
