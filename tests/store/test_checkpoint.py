"""WAL checkpoints that meet each other: ours, the runtime's, another process's.

SQLite answers a checkpoint that finds another one running "busy" at once, without
calling the busy handler. The erasure after a purge ends with a TRUNCATE checkpoint and
must not fail because the runtime's periodic passive one (or another process's) was
copying the WAL at that moment.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

from picobot.store.db import Database


async def big_wal(tmp_path: Path) -> Database:
    """A database whose WAL holds about 20 MB (automatic checkpoints are off)."""
    db = await Database.open(tmp_path / "c.db")
    await db.execute_write("CREATE TABLE blobs (b BLOB)")
    async with db.transaction() as conn:
        for _ in range(400):
            await conn.execute("INSERT INTO blobs VALUES (randomblob(50000))")
    assert wal_size(db) > 15_000_000
    return db


def wal_size(db: Database) -> int:
    wal = Path(f"{db.path}-wal")
    return wal.stat().st_size if wal.exists() else 0


async def test_truncate_waits_for_the_runtimes_passive_checkpoint(tmp_path: Path) -> None:
    db = await big_wal(tmp_path)
    try:
        passive = asyncio.create_task(db.checkpoint_passive())
        await asyncio.sleep(0.005)  # the passive one is copying the WAL now
        await db.checkpoint()
        assert await passive == 0
        assert wal_size(db) == 0
    finally:
        await db.close()


async def test_truncate_waits_out_another_connections_checkpoint(tmp_path: Path) -> None:
    db = await big_wal(tmp_path)
    started = threading.Event()

    def other_checkpoint() -> None:
        other = sqlite3.connect(db.path, isolation_level=None)
        try:
            started.set()
            other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            other.close()

    try:
        running = asyncio.create_task(asyncio.to_thread(other_checkpoint))
        await asyncio.to_thread(started.wait)
        await asyncio.sleep(0.005)  # the other connection is copying the WAL now
        await db.checkpoint()
        await running
        assert wal_size(db) == 0
        row = await db.fetchone("SELECT COUNT(*) FROM blobs")
        assert row is not None and row[0] == 400
    finally:
        await db.close()


async def test_close_during_a_passive_checkpoint_closes_every_connection(
    tmp_path: Path,
) -> None:
    db = await big_wal(tmp_path)
    passive = asyncio.create_task(db.checkpoint_passive())
    await asyncio.sleep(0)
    await db.close()
    assert await passive == 0
    assert wal_size(db) == 0
    assert await db.checkpoint_passive() == 0  # closed: nothing to do, no error
