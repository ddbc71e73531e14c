"""Database.write and Database.read: concurrent calls share one trip to a thread.

Writes share one transaction, each isolated by a SAVEPOINT; reads that queue while the
readers are busy go together, each in its own snapshot.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import picobot.store.db as dbmod
from picobot.errors import StoreUnavailable
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "c.db", busy_timeout_ms=200)
    await database.execute_write("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)")
    yield database
    await database.close()


def put(key: str, value: int) -> Callable[[sqlite3.Connection], int]:
    def run(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO t (k, v) VALUES (?, ?)", (key, value))
        return value * 10

    return run


async def rows(db: Database) -> dict[str, int]:
    return {str(r[0]): int(r[1]) for r in await db.fetchall("SELECT k, v FROM t")}


def count_batches(monkeypatch: pytest.MonkeyPatch, runner: str = "group_commit") -> list[int]:
    """Record the size of every batch the thread-side ``runner`` of picobot.store.db runs."""
    sizes: list[int] = []
    real = getattr(dbmod, runner)

    def traced(conn: sqlite3.Connection, fns: list[Any]) -> list[tuple[bool, Any]]:
        sizes.append(len(fns))
        result: list[tuple[bool, Any]] = real(conn, fns)
        return result

    monkeypatch.setattr(dbmod, runner, traced)
    return sizes


async def test_concurrent_writes_are_committed_together_and_each_gets_its_result(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = count_batches(monkeypatch)
    results = await asyncio.gather(*(db.write(put(f"k{i}", i)) for i in range(50)))
    assert results == [i * 10 for i in range(50)]
    assert await rows(db) == {f"k{i}": i for i in range(50)}
    # Writes queued while a batch runs share the next transaction.
    assert sum(sizes) == 50 and len(sizes) < 50, sizes


async def test_a_failing_write_undoes_only_its_own_statements(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = count_batches(monkeypatch)

    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t (k, v) VALUES ('bad', 1)")
        raise ValueError("broken write")

    def duplicate(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t (k, v) VALUES ('a', 2)")

    results = await asyncio.gather(
        db.write(put("first", 0)),
        db.write(put("a", 1)),
        db.write(half_then_fail),
        db.write(duplicate),
        db.write(put("b", 3)),
        return_exceptions=True,
    )
    assert results[:2] == [0, 10] and results[4] == 30
    assert isinstance(results[2], ValueError) and "broken write" in str(results[2])
    assert isinstance(results[3], sqlite3.IntegrityError)
    assert await rows(db) == {"first": 0, "a": 1, "b": 3}
    # The first found the writer idle and committed alone; the four that arrived
    # meanwhile, failures included, shared one transaction.
    assert sizes == [1, 4]


async def test_a_locked_database_fails_the_batch_clearly_and_writes_resume(
    db: Database,
) -> None:
    blocker = sqlite3.connect(db.path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        results = await asyncio.gather(
            *(db.write(put(f"k{i}", i)) for i in range(3)), return_exceptions=True
        )
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert all(isinstance(r, StoreUnavailable) and "locked" in str(r) for r in results)
    assert await rows(db) == {}
    assert await db.write(put("after", 1)) == 10
    assert await rows(db) == {"after": 1}


async def test_a_write_cancelled_before_its_batch_runs_is_skipped(db: Database) -> None:
    first = asyncio.create_task(db.write(put("first", 1)))
    second = asyncio.create_task(db.write(put("cancelled", 2)))
    await asyncio.sleep(0)  # both queued; the flusher has taken "first" only
    second.cancel()
    assert await first == 10
    with pytest.raises(asyncio.CancelledError):
        await second
    await db.write(put("later", 3))
    assert await rows(db) == {"first": 1, "later": 3}


async def test_writes_queued_behind_a_cancelled_one_are_committed(db: Database) -> None:
    started, release = threading.Event(), threading.Event()

    def slow(conn: sqlite3.Connection) -> int:
        started.set()
        release.wait(5)
        conn.execute("INSERT INTO t (k, v) VALUES ('slow', 9)")
        return 90

    lead = asyncio.create_task(db.write(slow))  # finds the writer idle: commits itself
    assert await asyncio.to_thread(started.wait, 5)
    behind = [asyncio.create_task(db.write(put(f"b{i}", i))) for i in range(3)]
    await asyncio.sleep(0)
    lead.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await lead
    assert await asyncio.gather(*behind) == [0, 10, 20]
    # The cancelled write had started: it ran to its end (its caller stopped waiting).
    assert await rows(db) == {"slow": 9, "b0": 0, "b1": 1, "b2": 2}


async def test_close_commits_writes_already_accepted(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    db = await Database.open(path)
    sid = await SessionRepo(db).create("tui", "local", "tui:local")
    repo = MessageRepo(db)
    pending = [asyncio.create_task(repo.append(sid, "user", f"m{i}", 1)) for i in range(20)]
    await asyncio.sleep(0)
    await db.close()
    assert [t.result().seq_order for t in pending] == list(range(1, 21))
    with pytest.raises(StoreUnavailable, match="closed"):
        await db.write(put("x", 1))
    with sqlite3.connect(path) as plain:
        assert plain.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 20


async def test_queued_reads_share_a_trip_and_fail_one_by_one(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await db.write(put("a", 1))
    sizes = count_batches(monkeypatch, "read_batch")

    def value(conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT v FROM t WHERE k = 'a'").fetchone()[0])

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("SELECT nope FROM t")

    results = await asyncio.gather(
        *(db.read(broken if i == 7 else value) for i in range(40)), return_exceptions=True
    )
    assert isinstance(results[7], StoreUnavailable) and "no such column" in str(results[7])
    assert [r for i, r in enumerate(results) if i != 7] == [1] * 39
    # The first reader takes the first; the rest queue and go in batches.
    assert sum(sizes) == 40 and len(sizes) < 40, sizes


async def test_reads_after_close_are_a_clear_error(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "c.db")
    queued = [asyncio.create_task(db.fetchall("SELECT 1")) for _ in range(10)]
    await asyncio.sleep(0)
    await db.close()
    for task in queued:
        # Handed to a reader before the close: answered; still queued: refused.
        try:
            assert [tuple(r) for r in task.result()] == [(1,)]
        except StoreUnavailable as exc:
            assert "closed" in str(exc)
    with pytest.raises(StoreUnavailable, match="closed"):
        await db.fetchall("SELECT 1")


async def test_a_write_sent_to_a_reader_fails_instead_of_being_rolled_back(db: Database) -> None:
    with pytest.raises(StoreUnavailable):
        await db.fetchall("INSERT INTO t (k, v) VALUES ('sneaky', 1) RETURNING k")
    assert await rows(db) == {}


def _thread(conn: sqlite3.Connection) -> int:
    return threading.get_ident()


async def test_reads_stay_on_the_first_reader_while_it_keeps_up(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Readers side by side contend for the GIL: a spare one waits for a slow read.
    monkeypatch.setattr(dbmod, "SPILL_SECS", 5.0)
    threads = await asyncio.gather(*(db.read(_thread) for _ in range(30)))
    assert len(set(threads)) == 1


async def test_a_slow_read_does_not_hold_up_the_others(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dbmod, "SPILL_SECS", 0.05)

    def slow(conn: sqlite3.Connection) -> int:
        time.sleep(1.0)  # an export, a big count
        return threading.get_ident()

    slow_read = asyncio.create_task(db.read(slow))
    await asyncio.sleep(0.01)
    started = time.monotonic()
    quick = await db.read(_thread)
    assert time.monotonic() - started < 0.8
    assert not slow_read.done()
    assert await slow_read != quick
