"""Storage faults: a database locked by another process, a read-only data dir, a full disk.

Each test says what is real and what is simulated. The promise under test is the same
every time: the user gets the clear ``store_unavailable`` answer (never a traceback or a
hang), nothing already stored is lost or damaged (``PRAGMA integrity_check``), and
service resumes by itself once the fault is gone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from websockets.asyncio.client import ClientConnection, connect

from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.channels.webhook.server import WebhookServer
from picobot.channels.websocket.server import WebSocketChannel
from picobot.config.channels import GenericWebhookSettings, WebhookSettings, WebSocketSettings
from picobot.config.settings import DataSettings, Settings
from picobot.errors import StoreUnavailable
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, Outbound, OutboundKind
from picobot.runtime import Runtime, open_runtime
from picobot.store import connect as connect_module
from picobot.store import db as db_module
from picobot.store.channels.webhooks import WebhookStore
from tests.channels.webhook.generic_client import signed_headers

from .conftest import SAFETY, Tmpfs, integrity, mounted_tmpfs, user_texts

KEY = "faults-ws-key-0123456789"
ALICE = Identity("tui", "tui:alice", "local")
SECRET = "faults-webhook-secret"

# A separate process that takes the write lock and holds it until told to let go.
LOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
conn.close()
print("released", flush=True)
"""


def settings_for(data_dir: Path, busy_timeout_ms: int = 5000) -> Settings:
    return Settings(data=DataSettings(dir=str(data_dir), busy_timeout_ms=busy_timeout_ms))


@asynccontextmanager
async def runtime_at(data_dir: Path, busy_timeout_ms: int = 5000) -> AsyncIterator[Runtime]:
    """A runtime whose start-up retention run (it may VACUUM) is over before the test acts."""
    settings = settings_for(data_dir, busy_timeout_ms)
    async with open_runtime(settings, provider=ScriptedProvider()) as rt:
        async with asyncio.timeout(SAFETY):
            await rt.tasks.job("retention").wait_runs(1)
        yield rt


async def turn(rt: Runtime, text: str, identity: Identity = ALICE) -> list[Outbound]:
    async with asyncio.timeout(SAFETY):
        return [e async for e in rt.kernel.handle(Inbound(identity, text))]


def assert_store_unavailable(events: list[Outbound]) -> None:
    assert events[-1].kind is OutboundKind.ERROR, events
    assert events[-1].code == "store_unavailable"
    assert "not saved" in events[-1].text
    assert all(e.kind is not OutboundKind.DONE for e in events)


@asynccontextmanager
async def lock_held_by_another_process(db_path: Path) -> AsyncIterator[None]:
    """A child process holds ``BEGIN EXCLUSIVE`` on ``db_path`` until the block ends."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        LOCKER,
        str(db_path),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        async with asyncio.timeout(SAFETY):
            assert await proc.stdout.readline() == b"locked\n"
        yield
    finally:
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        async with asyncio.timeout(SAFETY):
            out = await proc.stdout.read()
            assert await proc.wait() == 0
        assert out == b"released\n"


async def chat(ws: ClientConnection, text: str) -> list[dict[str, Any]]:
    """One chat message over the WebSocket; the frames answering it, up to ``end``."""
    await ws.send(json.dumps({"type": "chat", "text": text, "id": text}))
    frames = []
    async with asyncio.timeout(SAFETY):
        while not frames or frames[-1]["type"] != "end":
            frames.append(json.loads(await ws.recv()))
    return frames


async def test_lock_held_by_another_process_is_a_clear_error_then_service_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Real: a second OS process holds SQLite's write lock on the file (BEGIN EXCLUSIVE),
    a real WebSocket client chats through the real channel and kernel. Nothing is
    simulated but the model. The busy timeout is shortened to 300 ms so the wait for
    the lock is short."""
    data = tmp_path / "data"
    async with (
        runtime_at(data, busy_timeout_ms=300) as rt,
        WebSocketChannel(
            rt.kernel, WebSocketSettings(enabled=True, port=0), keys={KEY: "ws:alice"}
        ) as channel,
        connect(channel.url, additional_headers={"X-API-Key": KEY}) as ws,
    ):
        assert json.loads(await ws.recv())["type"] == "hello"
        assert [f["type"] for f in await chat(ws, "before the lock")][-2:] == ["done", "end"]
        async with lock_held_by_another_process(rt.db.path):
            with caplog.at_level(logging.ERROR):
                frames = await chat(ws, "while locked")
            errors = [f for f in frames if f["type"] == "error"]
            assert [e["code"] for e in errors] == ["store_unavailable"]
            assert "not saved" in errors[0]["message"]
            assert "done" not in [f["type"] for f in frames]
            assert "locked by another process" in caplog.text
            # Reads still work while another process writes (WAL): history answers.
            await ws.send(json.dumps({"type": "history", "id": "h"}))
            history = json.loads(await ws.recv())
            assert [m["content"] for m in history["messages"]] == [
                "before the lock",
                "You said: before the lock",
            ]
            assert json.loads(await ws.recv())["type"] == "end"
        frames = await chat(ws, "after the lock")
        assert frames[-2]["type"] == "done" and frames[-2]["text"] == "You said: after the lock"
    assert user_texts(data / "conversations.db") == ["before the lock", "after the lock"]
    assert integrity(data / "conversations.db") == ["ok"]


async def test_webhook_under_a_foreign_lock_is_refused_then_accepted(tmp_path: Path) -> None:
    """Real: another OS process holds the write lock; the generic webhook is served by
    the real core on a loopback aiohttp server; replies go to a loopback receiver.
    While the lock is held the message cannot be made durable, so it is not
    acknowledged (503, the platform retries); the retry after the release is accepted,
    answered once, and nothing else was stored."""
    received: list[dict[str, Any]] = []
    got_reply = asyncio.Event()

    async def receive(request: web.Request) -> web.Response:
        received.append(await request.json())
        got_reply.set()
        return web.json_response({"ok": True})

    receiver_app = web.Application()
    receiver_app.router.add_post("/callback", receive)
    receiver = TestServer(receiver_app, host="127.0.0.1", port=0)
    await receiver.start_server()
    data = tmp_path / "data"
    body = json.dumps({"user": "u", "chat": "c", "text": "hello", "message_id": "m1"}).encode()
    headers = signed_headers(body, secret=SECRET)
    try:
        async with runtime_at(data, busy_timeout_ms=300) as rt:
            platform = GenericPlatform(
                GenericWebhookSettings(
                    enabled=True, callback_url=str(receiver.make_url("/callback"))
                ),
                SECRET,
            )
            hooks = WebhookServer(
                rt.kernel,
                [platform],
                WebhookSettings(),
                store=WebhookStore(rt.db),
                max_attempts=3,
                supervisor=rt.tasks,
            )
            app = web.Application()
            hooks.add_routes(app)
            server = TestServer(app, host="127.0.0.1", port=0)
            await server.start_server()
            await hooks.start()
            url = str(server.make_url("/webhooks/generic"))
            try:
                async with aiohttp.ClientSession() as http:
                    async with (
                        lock_held_by_another_process(rt.db.path),
                        http.post(url, data=body, headers=headers) as resp,
                    ):
                        assert resp.status == 503
                    async with http.post(url, data=body, headers=headers) as resp:
                        assert resp.status == 200
                async with asyncio.timeout(SAFETY):
                    await got_reply.wait()
                    await hooks.wait_for(lambda s: s.delivered == 1)
            finally:
                await server.close()
                await hooks.close()
    finally:
        await receiver.close()
    assert [r["text"] for r in received] == ["You said: hello"]
    assert user_texts(data / "conversations.db") == ["hello"]
    assert integrity(data / "conversations.db") == ["ok"]


async def test_read_only_data_dir_is_a_clear_error_and_loses_nothing(
    tmpfs_4m: Tmpfs,
) -> None:
    """Real: the data dir is on a tmpfs remounted read-only (as root, file modes are
    ignored, so only a read-only mount makes the directory unwritable). Linux refuses
    to remount a file system read-only while a file on it is open for writing, so the
    runtime is closed before the remount: what is tested is PicoBot starting on a
    read-only data dir, in-process and as ``picobot serve``."""
    data = tmpfs_4m.path / "data"
    async with runtime_at(data) as rt:
        assert (await turn(rt, "written before"))[-1].kind is OutboundKind.DONE
    tmpfs_4m.remount("ro")
    try:
        with pytest.raises(StoreUnavailable, match=r"cannot open database .*writable"):
            async with runtime_at(data):
                pass
        env = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_")}
        env["PICOBOT_DATA__DIR"] = str(data)
        env["PICOBOT_LLM__PROVIDER"] = "scripted"
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "picobot", "serve"],
            env=env,
            cwd=tmpfs_4m.path.parent,
            capture_output=True,
            text=True,
            timeout=SAFETY,
            check=False,
        )
        assert done.returncode == 1, done.stderr
        assert "cannot open database" in done.stderr and "writable" in done.stderr
        assert "Traceback" not in done.stderr
        db_file = data / "conversations.db"
        assert user_texts(db_file, immutable=True) == ["written before"]
        assert integrity(db_file, immutable=True) == ["ok"]
    finally:
        tmpfs_4m.remount("rw")
    async with runtime_at(data) as rt:
        assert (await turn(rt, "written after"))[-1].kind is OutboundKind.DONE
    assert user_texts(data / "conversations.db") == ["written before", "written after"]
    assert integrity(data / "conversations.db") == ["ok"]


async def test_database_opened_read_only_refuses_turns_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Simulated at the I/O seam: ``open_sqlite`` opens the file with SQLite's
    ``mode=ro``, which is what a data dir turned read-only under a running server
    amounts to (a real remount is refused while the file is open). Real: the file, the
    kernel and SQLite's own "attempt to write a readonly database" error."""
    data = tmp_path / "data"
    async with runtime_at(data) as rt:
        assert (await turn(rt, "kept"))[-1].kind is OutboundKind.DONE
    real_connect = connect_module.open_sqlite

    def read_only(database: str, **kwargs: Any) -> Any:
        return real_connect(f"file:{database}?mode=ro", uri=True, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(connect_module, "open_sqlite", read_only)
        async with open_runtime(settings_for(data), provider=ScriptedProvider()) as rt:
            with caplog.at_level(logging.ERROR):
                events = await turn(rt, "refused")
            assert_store_unavailable(events)
            assert "is read-only" in caplog.text
            history = await rt.kernel.recent_history(ALICE)
            assert [m.content for m in history.messages] == ["kept", "You said: kept"]
    async with runtime_at(data) as rt:
        assert (await turn(rt, "writable again"))[-1].kind is OutboundKind.DONE
    assert user_texts(data / "conversations.db") == ["kept", "writable again"]
    assert integrity(data / "conversations.db") == ["ok"]


def fill(directory: Path) -> Path:
    """Write a file until the file system has no byte left; return its path."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (64 * 1024, 4096, 512, 1):
            for _ in range(4 * 1024 * 1024 // chunk + 1):  # bounded by the mount size
                try:
                    os.write(fd, b"\0" * chunk)
                except OSError:
                    break
    finally:
        os.close(fd)
    return filler


async def test_full_disk_is_a_clear_error_and_service_resumes_when_space_is_freed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Real: the data dir is a 2 MB tmpfs filled to the last byte by another file, so
    SQLite's own write fails with SQLITE_FULL ("database or disk is full"); the kernel,
    the file and the recovery are real. Deleting the filler frees the space."""
    with mounted_tmpfs(tmp_path / "mnt", "2m") as fs:
        data = fs.path / "data"
        async with runtime_at(data) as rt:
            assert (await turn(rt, "before the disk filled"))[-1].kind is OutboundKind.DONE
            filler = fill(fs.path)
            assert os.statvfs(fs.path).f_bavail == 0
            refused = []
            with caplog.at_level(logging.ERROR):
                # A write may still fit in space SQLite already holds; a few more turns
                # (bounded) must reach the end of it.
                for n in range(40):
                    text = f"turn {n} on a full disk " + "x" * 8000
                    events = await turn(rt, text)
                    if events[-1].kind is OutboundKind.ERROR:
                        refused.append(text)
                        assert_store_unavailable(events)
                        break
            assert refused, "the disk never filled up"
            assert "no space left for database" in caplog.text
            assert integrity(rt.db.path) == ["ok"]
            filler.unlink()
            events = await turn(rt, "after space was freed")
            assert events[-1].kind is OutboundKind.DONE
            texts = user_texts(rt.db.path)
        assert refused[0] not in texts
        assert texts[0] == "before the disk filled" and texts[-1] == "after space was freed"
        assert integrity(data / "conversations.db") == ["ok"]


async def pragma(conn: Any, text: str) -> None:
    """Run a PRAGMA to the end, so no open statement keeps a lock."""
    async with conn.execute(f"PRAGMA {text}") as cur:
        await cur.fetchall()


async def test_full_database_without_a_mount_is_a_clear_error_and_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Simulated at the I/O seam, for machines where a tmpfs cannot be mounted: the
    writer connection (captured as ``Database.open`` connects it) gets SQLite's
    ``max_page_count`` set to the file's current size, so SQLite itself fails the next
    write that needs a page with its real SQLITE_FULL ("database or disk is full").
    Raising the limit again stands for freeing space. Kernel and file are real."""
    connections: list[Any] = []
    real_connect = db_module.connect

    async def recording(*args: Any, **kwargs: Any) -> Any:
        conn = await real_connect(*args, **kwargs)
        connections.append(conn)
        return conn

    monkeypatch.setattr(db_module, "connect", recording)
    async with runtime_at(tmp_path / "data") as rt:
        writer = connections[0]  # Database.open connects the writer first
        assert (await turn(rt, "before the limit"))[-1].kind is OutboundKind.DONE
        pages = (await rt.db.fetchone("PRAGMA page_count"))[0]
        await pragma(writer, f"max_page_count = {int(pages)}")
        refused = []
        with caplog.at_level(logging.ERROR):
            for n in range(40):  # free pages inside the file may take a few turns
                text = f"turn {n} at the limit " + "x" * 8000
                events = await turn(rt, text)
                if events[-1].kind is OutboundKind.ERROR:
                    refused.append(text)
                    assert_store_unavailable(events)
                    break
        assert refused, "the page limit was never reached"
        assert "no space left for database" in caplog.text
        assert integrity(rt.db.path) == ["ok"]
        await pragma(writer, "max_page_count = 1073741823")
        assert (await turn(rt, "after the limit"))[-1].kind is OutboundKind.DONE
    texts = user_texts(tmp_path / "data" / "conversations.db")
    assert refused[0] not in texts
    assert texts[0] == "before the limit" and texts[-1] == "after the limit"
    assert integrity(tmp_path / "data" / "conversations.db") == ["ok"]
