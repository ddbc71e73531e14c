"""``/readyz`` reports whether the store takes writes; ``/healthz`` stays liveness.

The database is locked for real, by a second SQLite connection holding the write lock,
as another process (a backup tool, a stuck ``picobot`` command) would; its schema is
moved on by a second connection too, as a newer PicoBot's migrations would.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import sqlite3
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from picobot.admin.readiness import MAX_AGE_SECS
from picobot.config.channels import MAX_FREE_MB, ServerSettings
from picobot.config.settings import DataSettings, Settings
from picobot.store.migrations import MIGRATIONS
from tests.admin.helpers import Api, FakeClock, start

READY = {"status": "ready", "database": "ok", "migrations": "ok", "disk": "ok"}


async def test_readyz_is_503_while_writes_fail_though_healthz_says_ok(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    assert await api.call("GET", "/readyz", key=None) == READY
    db = api.runtime.db
    other = sqlite3.connect(db.path, isolation_level=None, check_same_thread=False)
    # Holds the write lock, as another process can. In a thread: waiting for a write of
    # the runtime's in progress must not block the event loop that write needs.
    await asyncio.to_thread(other.execute, "BEGIN IMMEDIATE")
    try:
        api.clock.now += MAX_AGE_SECS
        with caplog.at_level(logging.WARNING, logger="picobot.admin.readiness"):
            locked = await api.call("GET", "/readyz", key=None, expect=503)
        await api.call("GET", "/healthz", key=None)  # reads work: the process is alive
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert locked == {
        "status": "unavailable",
        "database": "unavailable",
        "migrations": "unknown",
        "disk": "ok",
    }
    warnings = [r.getMessage() for r in caplog.records if r.name == "picobot.admin.readiness"]
    assert warnings == ["readiness: not ready: a write did not commit within 2s (database locked?)"]
    api.clock.now += MAX_AGE_SECS
    assert await api.call("GET", "/readyz", key=None) == READY


async def test_readyz_is_503_when_the_disk_is_nearly_full(tmp_path: Path) -> None:
    # More free space asked for than this disk has: the check must say "low".
    wanted = shutil.disk_usage(tmp_path).free // 2**20 + 1024
    if wanted > MAX_FREE_MB:
        pytest.skip("this disk has more free space than the setting can ask for")
    server = ServerSettings(ready_min_free_mb=wanted)
    settings = Settings(data=DataSettings(dir=str(tmp_path)), server=server)
    async with AsyncExitStack() as stack:
        api = await start(stack, tmp_path, FakeClock(), settings=settings)
        body = await api.call("GET", "/readyz", key=None, expect=503)
    assert body == {"status": "unavailable", "database": "ok", "migrations": "ok", "disk": "low"}


async def test_readyz_is_503_when_the_database_is_closed(api: Api) -> None:
    await api.runtime.db.close()
    body = await api.call("GET", "/readyz", key=None, expect=503)
    assert body["database"] == "unavailable"


async def test_readyz_is_503_while_the_schema_is_not_this_versions(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    known = len(MIGRATIONS)
    other = sqlite3.connect(api.runtime.db.path, isolation_level=None, check_same_thread=False)
    try:
        # A newer PicoBot sharing the file applies a migration this one does not know.
        newer = "INSERT INTO _migrations (version, name, applied_at) VALUES (?, 'm_next', 0)"
        await asyncio.to_thread(other.execute, newer, (known + 1,))
        api.clock.now += MAX_AGE_SECS
        with caplog.at_level(logging.WARNING, logger="picobot.admin.readiness"):
            ahead = await api.call("GET", "/readyz", key=None, expect=503)
        await api.call("GET", "/healthz", key=None)  # alive: do not restart, replace it
        # The file is older than this PicoBot: its last migration is not applied.
        (name,) = other.execute(
            "SELECT name FROM _migrations WHERE version = ?", (known,)
        ).fetchone()
        await asyncio.to_thread(
            other.execute, "DELETE FROM _migrations WHERE version >= ?", (known,)
        )
        api.clock.now += MAX_AGE_SECS
        behind = await api.call("GET", "/readyz", key=None, expect=503)
        restore = "INSERT INTO _migrations (version, name, applied_at) VALUES (?, ?, 0)"
        await asyncio.to_thread(other.execute, restore, (known, name))
    finally:
        other.close()
    assert ahead == {**READY, "status": "unavailable", "migrations": "newer"}
    assert behind == {**READY, "status": "unavailable", "migrations": "pending"}
    warnings = [r.getMessage() for r in caplog.records if r.name == "picobot.admin.readiness"]
    assert warnings == [
        f"readiness: not ready: the database's schema version is {known + 1}, this PicoBot's"
        f" is {known} (a newer PicoBot migrated it)"
    ]
    api.clock.now += MAX_AGE_SECS
    assert await api.call("GET", "/readyz", key=None) == READY
