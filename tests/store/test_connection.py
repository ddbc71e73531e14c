"""The connection thread: calls run in order in one thread; a closed connection says so."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from picobot.store.connection import AsyncConnection


@pytest.fixture
async def conn(tmp_path: Path) -> AsyncIterator[AsyncConnection]:
    def opener() -> sqlite3.Connection:
        plain = sqlite3.connect(tmp_path / "c.db", isolation_level=None)
        plain.row_factory = sqlite3.Row
        return plain

    connection = await AsyncConnection.open(opener, name="test-db")
    try:
        yield connection
    finally:
        await connection.close()


async def test_every_call_runs_in_the_one_thread_in_order(conn: AsyncConnection) -> None:
    seen: list[tuple[int, str]] = []

    def record(plain: sqlite3.Connection, n: int) -> int:
        seen.append((n, threading.current_thread().name))
        return n

    results = await asyncio.gather(*(conn.run(record, n) for n in range(20)))
    assert results == list(range(20))
    assert [n for n, _ in seen] == list(range(20))
    assert {name for _, name in seen} == {"test-db"}
    assert threading.current_thread().name != "test-db"


async def test_statements_and_cursors(conn: AsyncConnection) -> None:
    await conn.execute("CREATE TABLE t (x TEXT)")
    await conn.execute("BEGIN")
    assert conn.in_transaction
    cur = await conn.executemany("INSERT INTO t VALUES (?)", [("a",), ("b",)])
    assert cur.rowcount == 2
    await conn.commit()
    assert not conn.in_transaction
    async with conn.execute("SELECT x FROM t ORDER BY x") as rows:
        assert (await rows.fetchone())["x"] == "a"  # type: ignore[index]
        assert [r["x"] for r in await rows.fetchall()] == ["b"]
    cur = await conn.execute("INSERT INTO t VALUES (?)", ("c",))
    assert cur.lastrowid == 3
    await conn.rollback()  # no transaction: nothing to undo, no error


async def test_errors_reach_the_caller_and_the_thread_goes_on(conn: AsyncConnection) -> None:
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        await conn.execute("SELECT * FROM missing")
    assert await conn.run(lambda plain: plain.execute("SELECT 7").fetchone()[0]) == 7


async def test_a_call_cancelled_before_it_starts_never_runs(conn: AsyncConnection) -> None:
    gate = threading.Event()
    ran: list[str] = []
    blocker = asyncio.ensure_future(conn.run(lambda plain: gate.wait(5)))
    skipped = asyncio.ensure_future(conn.run(lambda plain: ran.append("skipped")))
    await asyncio.sleep(0.01)
    skipped.cancel()
    gate.set()
    assert await blocker
    assert await conn.run(lambda plain: "after") == "after"
    assert ran == []


async def test_a_closed_connection_refuses_calls(conn: AsyncConnection) -> None:
    await conn.close()
    await conn.close()  # idempotent
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        await conn.run(lambda plain: None)
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        await conn.execute("SELECT 1")
