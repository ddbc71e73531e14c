"""One SQLite connection and the one thread that uses it: the store's async driver.

``sqlite3`` blocks, so each connection lives in its own single-thread executor and
every call is a trip to that thread, in the order made (a call queued behind one that
was cancelled while running still waits for it). :meth:`AsyncConnection.run` runs a
whole function of the plain ``sqlite3`` connection in one trip: the group commit and
the read batches of :class:`picobot.store.db.Database` need that, and aiosqlite has no
public way to do it. The rest is the small part of aiosqlite's API the store's
transactions use (``execute`` awaited or in ``async with``, ``executemany``,
``commit``, ``rollback``), so that code reads as before.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Callable, Coroutine, Generator, Iterable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")


class AsyncConnection:
    """A ``sqlite3`` connection used only in its own thread. Use :meth:`open`."""

    def __init__(self, conn: sqlite3.Connection, executor: ThreadPoolExecutor) -> None:
        self._conn = conn
        self._executor = executor
        self._closed = False

    @classmethod
    async def open(
        cls, opener: Callable[[], sqlite3.Connection], *, name: str = "picobot-db"
    ) -> AsyncConnection:
        """Start a thread and open the connection in it with ``opener``.

        ``opener`` runs in the new thread (a connection is used only where it was made)
        and may set it up (row factory, functions, pragmas) before any other call.
        """
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        try:
            conn = await asyncio.get_running_loop().run_in_executor(executor, opener)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(conn, executor)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` in the connection's thread, after every earlier call.

        Raises ``sqlite3.ProgrammingError`` (as ``sqlite3`` does) once closed.
        """
        return await self._call(fn, self._conn, *args)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args))

    def execute(self, sql: str, parameters: Any = ()) -> PendingCursor:
        """Run one statement; await the result, or ``async with`` it to close it after."""
        return PendingCursor(self._cursor(self._conn.execute, sql, parameters))

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> AsyncCursor:
        """Run one statement for each parameter set."""
        return await self._cursor(self._conn.executemany, sql, parameters)

    async def _cursor(self, method: Callable[..., sqlite3.Cursor], *args: Any) -> AsyncCursor:
        return AsyncCursor(self, await self._call(method, *args))

    async def commit(self) -> None:
        """COMMIT the open transaction."""
        await self._call(self._conn.commit)

    async def rollback(self) -> None:
        """ROLLBACK the open transaction (nothing happens when there is none)."""
        await self._call(self._conn.rollback)

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (read without a trip to the thread)."""
        return self._conn.in_transaction

    async def close(self) -> None:
        """Close the connection after every call already made, then end the thread."""
        if self._closed:
            return
        try:
            await self._call(self._conn.close)
        finally:
            self._closed = True
            self._executor.shutdown(wait=False)


class AsyncCursor:
    """The cursor of one statement; fetches are trips to the connection's thread."""

    def __init__(self, conn: AsyncConnection, cursor: sqlite3.Cursor) -> None:
        self._conn = conn
        self._cursor = cursor

    @property
    def rowcount(self) -> int:
        """Rows the statement changed (``sqlite3.Cursor.rowcount``)."""
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        """Rowid of the last inserted row (``sqlite3.Cursor.lastrowid``)."""
        return self._cursor.lastrowid

    async def fetchone(self) -> sqlite3.Row | None:
        """The next row, or None."""
        row: sqlite3.Row | None = await self._conn._call(self._cursor.fetchone)
        return row

    async def fetchall(self) -> list[sqlite3.Row]:
        """Every remaining row."""
        rows: list[sqlite3.Row] = await self._conn._call(self._cursor.fetchall)
        return rows

    async def close(self) -> None:
        """Finalize the statement (an open one would hold its read snapshot)."""
        await self._conn._call(self._cursor.close)

    async def __aenter__(self) -> AsyncCursor:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class PendingCursor:
    """What :meth:`AsyncConnection.execute` returns: awaitable, or an async context."""

    def __init__(self, coro: Coroutine[Any, Any, AsyncCursor]) -> None:
        self._coro = coro
        self._cursor: AsyncCursor | None = None

    def __await__(self) -> Generator[Any, None, AsyncCursor]:
        return self._coro.__await__()

    async def __aenter__(self) -> AsyncCursor:
        self._cursor = await self._coro
        return self._cursor

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._cursor is not None:
            await self._cursor.close()
