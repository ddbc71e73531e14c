"""One SQLite connection and the one thread that uses it: the store's async driver.

``sqlite3`` blocks, so each connection lives in a thread of its own that takes calls
from a queue, in the order made (a call queued behind one that was cancelled while
running still waits for it). A plain queue and ``call_soon_threadsafe``, not a
``ThreadPoolExecutor``: a trip is the unit cost of every query, and the executor's
future chaining made it measurably dearer. :meth:`AsyncConnection.run` runs a
whole function of the plain ``sqlite3`` connection in one trip: the group commit and
the read batches of :class:`picobot.store.db.Database` need that, and aiosqlite has no
public way to do it. The rest is the small part of aiosqlite's API the store's
transactions use (``execute`` awaited or in ``async with``, ``executemany``,
``commit``, ``rollback``), so that code reads as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import threading
from collections.abc import Callable, Coroutine, Generator, Iterable
from queue import SimpleQueue
from typing import Any, TypeVar

T = TypeVar("T")


Job = tuple[asyncio.Future[Any], Callable[[], Any]]
"""A call for the thread and the future its caller awaits."""


def _serve(jobs: SimpleQueue[Job | None]) -> None:
    """The connection's thread: run each job in order, hand its outcome to its loop."""
    while (job := jobs.get()) is not None:
        future, call = job
        if future.cancelled():  # its caller gave up before it started: skip it
            continue
        try:
            result = call()
        except BaseException as exc:
            _post(future, future.set_exception, exc)
        else:
            _post(future, future.set_result, result)


def _post(future: asyncio.Future[Any], settle: Callable[[Any], None], value: Any) -> None:
    def settle_if_waiting() -> None:
        if not future.done():  # cancelled meanwhile
            settle(value)

    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        future.get_loop().call_soon_threadsafe(settle_if_waiting)


class AsyncConnection:
    """A ``sqlite3`` connection used only in its own thread. Use :meth:`open`."""

    def __init__(self, jobs: SimpleQueue[Job | None], name: str) -> None:
        self._jobs = jobs
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        # A daemon: a database left open must not keep the process from exiting.
        threading.Thread(target=_serve, args=(jobs,), name=name, daemon=True).start()

    @classmethod
    async def open(
        cls, opener: Callable[[], sqlite3.Connection], *, name: str = "picobot-db"
    ) -> AsyncConnection:
        """Start a thread and open the connection in it with ``opener``.

        ``opener`` runs in the new thread (a connection is used only where it was made)
        and may set it up (row factory, functions) before any other call.
        """
        self = cls(SimpleQueue(), name)
        try:
            self._conn = await self._call(opener)
        except BaseException:
            self._stop()
            raise
        return self

    @property
    def _sqlite(self) -> sqlite3.Connection:
        if self._conn is None:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        return self._conn

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` in the connection's thread, after every earlier call.

        Raises ``sqlite3.ProgrammingError`` (as ``sqlite3`` does) once closed.
        """
        return await self._call(functools.partial(fn, self._sqlite, *args))

    async def _call(self, call: Callable[[], T]) -> T:
        """``call()`` in the thread. Cancelled before the thread starts it, it never runs;
        once started it runs to its end (the caller just stops waiting)."""
        if self._closed:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._jobs.put((future, call))
        return await future

    def _stop(self) -> None:
        self._closed = True
        self._jobs.put(None)

    def execute(self, sql: str, parameters: Any = ()) -> PendingCursor:
        """Run one statement; await the result, or ``async with`` it to close it after."""
        return PendingCursor(self._cursor(self._sqlite.execute, sql, parameters))

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> AsyncCursor:
        """Run one statement for each parameter set."""
        return await self._cursor(self._sqlite.executemany, sql, parameters)

    async def _cursor(self, method: Callable[..., sqlite3.Cursor], *args: Any) -> AsyncCursor:
        return AsyncCursor(self, await self._call(functools.partial(method, *args)))

    async def commit(self) -> None:
        """COMMIT the open transaction."""
        await self._call(self._sqlite.commit)

    async def rollback(self) -> None:
        """ROLLBACK the open transaction (nothing happens when there is none)."""
        await self._call(self._sqlite.rollback)

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (read without a trip to the thread)."""
        return self._sqlite.in_transaction

    async def close(self) -> None:
        """Close the connection after every call already made, then end the thread."""
        if self._closed:
            return
        try:
            await self._call(self._sqlite.close)
        finally:
            self._stop()


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

    async def __aexit__(self, *exc_info: object) -> None:
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

    async def __aexit__(self, *exc_info: object) -> None:
        if self._cursor is not None:
            await self._cursor.close()
