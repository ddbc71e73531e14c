"""``/readyz`` reports whether the store takes writes; ``/healthz`` stays liveness.

The database is locked for real, by a second SQLite connection holding the write lock,
as another process (a backup tool, a stuck ``picobot`` command) would.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from picobot.admin.readiness import MAX_AGE_SECS
from picobot.config.channels import ServerSettings
from tests.admin.served import MovableClock, serve_admin

READY = {"status": "ready", "database": "ok", "disk": "ok"}


async def test_readyz_is_503_while_writes_fail_though_healthz_says_ok(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = MovableClock()
    async with AsyncExitStack() as stack:
        runtime, client = await serve_admin(stack, tmp_path, ServerSettings(), clock)
        async with client.get("/readyz") as r:
            assert (r.status, await r.json()) == (200, READY)
        other = sqlite3.connect(runtime.db.path, isolation_level=None, check_same_thread=False)
        # Holds the write lock, as another process can. In a thread: waiting for a write
        # of the runtime's in progress must not block the event loop that write needs.
        await asyncio.to_thread(other.execute, "BEGIN IMMEDIATE")
        try:
            clock.now += MAX_AGE_SECS
            with caplog.at_level(logging.WARNING, logger="picobot.admin.readiness"):
                async with client.get("/readyz") as r:
                    locked = (r.status, await r.json())
                async with client.get("/healthz") as r:
                    alive = r.status  # reads still work: the process is alive
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert locked == (503, {"status": "unavailable", "database": "unavailable", "disk": "ok"})
        assert alive == 200
        warnings = [r.getMessage() for r in caplog.records if r.name == "picobot.admin.readiness"]
        assert warnings == [
            "readiness: not ready: a write did not commit within 2s (database locked?)"
        ]
        clock.now += MAX_AGE_SECS
        async with client.get("/readyz") as r:
            assert (r.status, await r.json()) == (200, READY)


async def test_readyz_is_503_when_the_disk_is_nearly_full(tmp_path: Path) -> None:
    # More free space asked for than any disk has: the check must say "low".
    server = ServerSettings(ready_min_free_mb=2**40)
    async with AsyncExitStack() as stack:
        _, client = await serve_admin(stack, tmp_path, server, MovableClock())
        async with client.get("/readyz") as r:
            assert r.status == 503
            assert await r.json() == {"status": "unavailable", "database": "ok", "disk": "low"}


async def test_readyz_is_503_when_the_database_is_closed(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        runtime, client = await serve_admin(stack, tmp_path, ServerSettings(), MovableClock())
        await runtime.db.close()
        async with client.get("/readyz") as r:
            assert r.status == 503
            assert (await r.json())["database"] == "unavailable"
