"""Logging set-up: secrets never reach the log file."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from aiohttp import web

from picobot.config.settings import Settings
from picobot.logsetup import logging_to
from picobot.store.db import Database


def test_log_file_gets_redacted_records(tmp_path: Path) -> None:
    key = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    path = tmp_path / "picobot.log"
    with logging_to(path, Settings()):
        logging.getLogger("picobot.test").warning("user pasted %s into chat", key)
    text = path.read_text()
    assert "user pasted [REDACTED:github_token] into chat" in text
    assert key not in text


async def test_a_malformed_request_is_one_line_without_its_content(tmp_path: Path) -> None:
    app = web.Application()
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    path = tmp_path / "picobot.log"
    try:
        with logging_to(path, Settings()):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /api?user=SOMEUSER&q=" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n")
            await writer.drain()
            assert (await reader.read(64)).startswith(b"HTTP/1.")
            writer.close()
    finally:
        await runner.cleanup()
    lines = path.read_text().splitlines()
    assert len(lines) == 1, lines
    assert " WARNING aiohttp.server: " in lines[0]
    assert "rejected a malformed request (LineTooLong, HTTP 400)" in lines[0]
    assert "SOMEUSER" not in lines[0]


async def test_debug_logs_no_chat_text_from_sqlite_or_websockets(tmp_path: Path) -> None:
    from websockets.asyncio.client import connect
    from websockets.asyncio.server import ServerConnection, serve

    marker = "my-diary-entry-7f3a"
    path = tmp_path / "picobot.log"

    async def echo(ws: ServerConnection) -> None:
        async for frame in ws:
            await ws.send(frame)

    with logging_to(path, Settings(logging={"level": "DEBUG"})):
        logging.getLogger("picobot.test").debug("picobot's own debug line")
        db = await Database.open(tmp_path / "t.db", migrate=False)
        try:
            async with db.transaction() as conn:
                await conn.execute("CREATE TABLE t (x TEXT)")
            await db.execute_write("INSERT INTO t VALUES (?)", (marker,))
            assert (await db.fetchall("SELECT x FROM t"))[0][0] == marker
        finally:
            await db.close()
        async with serve(echo, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            async with connect(f"ws://127.0.0.1:{port}") as ws:
                await ws.send(marker)
                assert await ws.recv() == marker
    text = path.read_text()
    # DEBUG still works for PicoBot itself; the libraries' content never lands.
    assert "picobot's own debug line" in text
    assert marker not in text
    # And the levels are restored afterwards.
    assert logging.getLogger("websockets").level == logging.NOTSET
