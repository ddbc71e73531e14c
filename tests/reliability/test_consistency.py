"""Read-after-write under concurrent reads: a read issued after a commit must see it.

Real: the SQLite file, PicoBot's two connections (writer and shared reader) and many
coroutines reading at once, as the webhook workers, the kernel and the admin API do
under load. This is the property the webhook delivery worker relies on when it
re-reads a reply before sending it ("use the row as it is now"): when reads that
overlapped on the shared reader could see an older WAL snapshot, a reply already
marked sent was sent a second time (found by test_crash).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from picobot.store.db import Database

from .conftest import SAFETY

READERS = 8
WRITES = 60


async def test_reads_see_every_commit_made_before_them(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "c.db", migrate=False)
    try:
        await db.execute_write("CREATE TABLE t (x INTEGER)")
        done = asyncio.Event()

        async def churn() -> None:
            # Keep the shared reader busy with overlapping queries, like a server.
            while not done.is_set():
                await db.fetchall("SELECT x FROM t")

        readers = [asyncio.create_task(churn()) for _ in range(READERS)]
        stale = []
        try:
            async with asyncio.timeout(SAFETY):
                for n in range(1, WRITES + 1):
                    await db.execute_write("INSERT INTO t (x) VALUES (?)", (n,))
                    row = await db.fetchone("SELECT COUNT(*) FROM t")
                    assert row is not None
                    if row[0] != n:
                        stale.append((n, row[0]))
        finally:
            done.set()
            await asyncio.gather(*readers)
        assert stale == [], f"(committed rows, rows seen) of stale reads: {stale[:5]}"
    finally:
        await db.close()
