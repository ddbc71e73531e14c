"""The aiosqlite database: WAL, foreign keys, busy timeout, one serialized writer.

Two connections: a writer used only inside :meth:`Database.transaction` (held under an
asyncio lock, so writes are serialized and each is one ``BEGIN IMMEDIATE`` transaction)
and a reader for queries, which in WAL mode never waits for the writer. SQLite errors
that mean "the database cannot be used now" become :class:`StoreUnavailable` with a
message an operator can act on.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from picobot.errors import StoreUnavailable
from picobot.store.terms import INDEX_TEXT_FUNCTION, index_text

log = logging.getLogger(__name__)

Row = sqlite3.Row


def explain(exc: sqlite3.Error, path: Path) -> str:
    """Turn an SQLite error into one line an operator can act on."""
    msg = str(exc).lower()
    if "locked" in msg or "busy" in msg:
        return f"database {path} is locked by another process; try again when it is free"
    if "readonly" in msg or "read-only" in msg:
        return f"database {path} is read-only; check the permissions of the data directory"
    if "disk is full" in msg or "full" in msg:
        return f"no space left for database {path}; free some disk space"
    if "unable to open" in msg:
        return f"cannot open database {path}; check that the data directory exists and is writable"
    if "malformed" in msg or "not a database" in msg:
        return f"database {path} is damaged or not a PicoBot database"
    return f"database {path} error: {exc}"


class Database:
    """An open PicoBot database. Use :meth:`open`; close with :meth:`close`."""

    def __init__(self, path: Path, writer: aiosqlite.Connection, reader: aiosqlite.Connection):
        self.path = path
        self._writer = writer
        self._reader = reader
        self._write_lock = asyncio.Lock()
        self._closed = False
        self._maintenance: aiosqlite.Connection | None = None
        self._busy_timeout_ms = 5000

    @classmethod
    async def open(
        cls, path: Path, *, busy_timeout_ms: int = 5000, migrate: bool = True
    ) -> Database:
        """Open (creating if needed) the database file and apply pending migrations."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(
                f"cannot create data directory {path.parent}: {exc.strerror}"
            ) from None
        writer = reader = None
        try:
            writer = await _connect(path, busy_timeout_ms)
            await _pragma(writer, "journal_mode=WAL")
            # Checkpoints run in the background (checkpoint_passive), not inside a
            # commit: the automatic one made ~1% of writes take ~6 ms (see
            # docs/performance.md).
            await _pragma(writer, "wal_autocheckpoint=0")
            reader = await _connect(path, busy_timeout_ms)
        except sqlite3.Error as exc:
            for conn in (writer, reader):
                if conn is not None:
                    await conn.close()
            raise StoreUnavailable(explain(exc, path)) from None
        db = cls(path, writer, reader)
        db._busy_timeout_ms = busy_timeout_ms
        if migrate:
            from picobot.store.migrations import apply_migrations

            try:
                await apply_migrations(db)
            except BaseException:
                await db.close()
                raise
        return db

    async def close(self) -> None:
        """Checkpoint the WAL and close both connections; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        # The readers go first, so the checkpoint never waits for our own read snapshot.
        await self._reader.close()
        if self._maintenance is not None:
            await self._maintenance.close()
        try:
            async with self._write_lock:
                await _pragma(self._writer, "wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            log.warning("WAL checkpoint on close failed: %s", explain(exc, self.path))
        finally:
            await self._writer.close()

    async def checkpoint_passive(self) -> int:
        """Copy what it can of the WAL into the database without blocking anyone.

        Run periodically by the runtime, since automatic checkpoints are off. Uses its
        own connection, so neither the writer lock nor the reader is held. Returns the
        number of WAL frames still not checkpointed (readers may pin some).
        """
        if self._closed:
            return 0
        if self._maintenance is None:
            self._maintenance = await _connect(self.path, self._busy_timeout_ms)
        try:
            rows = await _pragma(self._maintenance, "wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            raise StoreUnavailable(explain(exc, self.path)) from None
        if not rows:
            return 0
        _busy, log_frames, done = (int(v) for v in rows[0])
        return max(0, log_frames - done)

    async def checkpoint(self) -> None:
        """Copy the whole WAL into the database file and truncate the WAL to 0 bytes.

        The WAL keeps old page images (including deleted text) until a checkpoint
        overwrites or truncates it. Runs under the writer lock, outside any transaction;
        SQLite waits up to the busy timeout for readers that still use WAL frames. Raises
        StoreUnavailable when the WAL could not be emptied (a reader, possibly in another
        process, kept an old snapshot open).
        """
        async with self._write_lock:
            try:
                rows = await _pragma(self._writer, "wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as exc:
                raise StoreUnavailable(explain(exc, self.path)) from None
        busy = int(rows[0][0]) if rows else 1
        if busy:
            raise StoreUnavailable(
                f"database {self.path}: the WAL could not be checkpointed because another"
                " connection is still reading; deleted data stays in the WAL until the next"
                " checkpoint"
            )

    async def vacuum(self) -> None:
        """Rewrite the database file from its live rows (``VACUUM``), under the writer lock.

        Every page is rebuilt, so no byte of a deleted row survives in the unused space
        of a page or on the freelist. The rewrite goes through the WAL: follow it with
        :meth:`checkpoint`. Needs free disk space of about twice the database size (a
        temporary copy plus the WAL) and blocks other writers while it runs.
        """
        async with self._write_lock:
            try:
                async with self._writer.execute("VACUUM"):
                    pass
            except sqlite3.Error as exc:
                raise StoreUnavailable(explain(exc, self.path)) from None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """One serialized write transaction; commits on success, rolls back on error."""
        async with self._write_lock:
            try:
                await self._writer.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreUnavailable(explain(exc, self.path)) from None
            except asyncio.CancelledError:
                # The BEGIN still runs in aiosqlite's thread; undo it (queued behind it),
                # or every later write on this connection would fail.
                await self._rollback()
                raise
            try:
                yield self._writer
            except sqlite3.OperationalError as exc:
                # Locked, read-only, full disk: the write is undone and nothing is lost.
                await self._rollback()
                raise StoreUnavailable(explain(exc, self.path)) from None
            except BaseException:
                await self._rollback()
                raise
            try:
                await self._writer.commit()
            except sqlite3.Error as exc:
                await self._rollback()
                raise StoreUnavailable(explain(exc, self.path)) from None

    async def _rollback(self) -> None:
        try:
            await self._writer.rollback()
        except sqlite3.Error:
            log.exception("rollback failed on %s", self.path)

    async def execute_write(self, sql: str, params: Iterable[Any] = ()) -> int:
        """Run one write statement in its own transaction; return lastrowid."""
        async with self.transaction() as conn:
            cur = await conn.execute(sql, tuple(params))
            return cur.lastrowid or 0

    async def fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[Row]:
        """Run a query on the reader connection."""
        try:
            # One job in aiosqlite's thread: the statement runs to completion before any
            # other read starts, so each read sees every commit made before it. (An open
            # cursor would pin the WAL snapshot for reads interleaved with it.)
            return list(await self._reader.execute_fetchall(sql, tuple(params)))
        except sqlite3.OperationalError as exc:
            raise StoreUnavailable(explain(exc, self.path)) from None

    async def fetchone(self, sql: str, params: Iterable[Any] = ()) -> Row | None:
        """First row of a query, or None."""
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None


async def _pragma(conn: aiosqlite.Connection, pragma: str) -> list[Row]:
    """Run a PRAGMA and finalize its statement (an open one would hold a lock)."""
    async with conn.execute(f"PRAGMA {pragma}") as cur:
        return list(await cur.fetchall())


async def _connect(path: Path, busy_timeout_ms: int) -> aiosqlite.Connection:
    # isolation_level=None: we issue BEGIN/COMMIT ourselves so a transaction is exactly
    # what transaction() says, not what the sqlite3 module guesses.
    conn = await aiosqlite.connect(str(path), isolation_level=None, timeout=busy_timeout_ms / 1000)
    try:
        conn.row_factory = sqlite3.Row
        # The recall index's triggers compute its per-user terms with this function.
        await conn.create_function(INDEX_TEXT_FUNCTION, 2, index_text, deterministic=True)
        await _pragma(conn, f"busy_timeout={int(busy_timeout_ms)}")
        await _pragma(conn, "foreign_keys=ON")
        # Purged text must not survive in free space: zero every deleted cell and freed
        # page instead of only unlinking it (see picobot.store.purge.erase_residue).
        await _pragma(conn, "secure_delete=ON")
        # NORMAL is durable against process crashes in WAL mode; only an OS crash or
        # power loss can undo the last commits.
        await _pragma(conn, "synchronous=NORMAL")
    except BaseException:
        await conn.close()
        raise
    return conn
