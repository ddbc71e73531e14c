"""The SQLite database: WAL, foreign keys, busy timeout, one serialized writer.

Each connection has a thread of its own (:class:`picobot.store.connection.AsyncConnection`).
A writer connection used only under an asyncio lock (so writes are serialized) and
reader connections (two by default) for queries, which in WAL
mode never wait for the writer; :meth:`Database.read` runs several in one trip and one
snapshot. Writes come in two forms:

- :meth:`Database.transaction`: an async block of ``execute`` calls, one ``BEGIN
  IMMEDIATE`` transaction (each statement is a trip to the writer's thread).
- :meth:`Database.write`: a plain function of the ``sqlite3`` connection, run in the
  writer thread. Writes that arrive while one is running are *group-committed*: the
  next batch runs in one thread trip and one transaction, each function inside its own
  SAVEPOINT, so one failing function undoes only its own statements. A caller's await
  returns only after the COMMIT that made its write durable. The hot path (storing a
  chat message, recording a webhook) uses it: a commit writes every page it touched to
  the WAL, so one commit for many concurrent messages does much less work than one each.

SQLite errors that mean "the database cannot be used now" become
:class:`StoreUnavailable` with a message an operator can act on.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from picobot.errors import StoreUnavailable
from picobot.store.batches import WriteFn, group_commit, read_batch
from picobot.store.connect import connect, explain, pragma
from picobot.store.connection import AsyncConnection
from picobot.store.engine import Engine, sqlite_engine
from picobot.store.keys.keyring import KeyRing
from picobot.store.keys.sealing import Sealer

log = logging.getLogger(__name__)

Row = sqlite3.Row
T = TypeVar("T")

DEFAULT_READERS = 2
"""Reader connections (threads) of a :class:`Database`."""

MAX_BATCH = 128
"""Most write functions one group commit runs; bounds the time the write lock is held."""

SPILL_SECS = 0.02
"""A spare reader (any but the first) takes queued reads once the readers before it have
been busy for this long per read of the batch they run: only a slow read (an export, a
big count) makes readers run side by side. Side by side they contend for the GIL (SQLite
gives it up and takes it back at every row and every SQL function call): on 2 cores two
readers kept busy served a quarter fewer turns/s than one."""


class Database:
    """An open PicoBot database. Use :meth:`open`; close with :meth:`close`."""

    def __init__(
        self,
        path: Path,
        writer: AsyncConnection,
        readers: list[AsyncConnection],
        maintenance: AsyncConnection,
        sealer: Sealer | None = None,
        engine: Engine | None = None,
    ):
        self.path = path
        # Which server holds the data, and how its errors read (SQLite unless given).
        self.engine = engine or sqlite_engine(path)
        # Seals what the repositories store with its owner's key (see picobot.store.keys).
        self.sealer = sealer or Sealer()
        self._writer = writer
        self._readers = readers
        self._maintenance = maintenance  # for passive checkpoints
        self._idle_readers = list(range(len(readers)))
        # When each reader took its batch, and the batch's size (see SPILL_SECS).
        self._busy_since = [0.0] * len(readers)
        self._batch_len = [0] * len(readers)
        self._spill: asyncio.TimerHandle | None = None
        self._read_queue: list[tuple[WriteFn, asyncio.Future[Any]]] = []
        self._read_tasks: set[asyncio.Task[None]] = set()
        self._write_lock = asyncio.Lock()
        # One checkpoint at a time: SQLite answers a second one "busy" without waiting.
        self._checkpoint_lock = asyncio.Lock()
        self.search_compaction = asyncio.Lock()  # see SearchIndex.optimize
        self._closed = False
        self._busy_timeout_ms = 5000
        self._pending: list[tuple[WriteFn, asyncio.Future[Any]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._leading = False  # a caller is committing its own write (see write)
        # Repositories pass the free text they store (model output above all) through it.
        self.redact: Callable[[str], str] = str

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        busy_timeout_ms: int = 5000,
        migrate: bool = True,
        readers: int = DEFAULT_READERS,
        keys: KeyRing | None = None,
        url: str | None = None,
    ) -> Database:
        """Open (creating if needed) the database file and apply pending migrations.

        ``readers`` connections serve queries, each in its own thread: the first while
        it keeps up, the others while a slow read holds up the ones before (SPILL_SECS).
        ``keys``: the key store that seals users' texts (the caller closes it); without
        one, texts are stored in clear (tools and tests) and sealed ones read as erased.
        A database bound to another key store is refused (:func:`bind_key_store`).
        ``url``: a ``postgresql://`` database instead of the file; ``path`` then only
        says where the data directory's other files go (see :mod:`picobot.store.postgres`).
        """
        sealer = Sealer(keys)
        if url is not None:
            from picobot.store.postgres.engine import open_postgres

            return await open_postgres(
                cls, url, path, readers=readers, sealer=sealer, migrate=migrate
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(
                f"cannot create data directory {path.parent}: {exc.strerror}"
            ) from None
        writer = None
        conns: list[AsyncConnection] = []
        try:
            writer = await connect(path, busy_timeout_ms, writer=True, sealer=sealer)
            for _ in range(max(1, readers)):
                conns.append(await connect(path, busy_timeout_ms, sealer=sealer))
                # Reads run inside BEGIN ... ROLLBACK: a write slipped in by mistake
                # must fail loudly, not vanish with the rollback.
                await pragma(conns[-1], "query_only=ON")
            conns.append(await connect(path, busy_timeout_ms, sealer=sealer))
        except sqlite3.Error as exc:
            for conn in (writer, *conns):
                if conn is not None:
                    await conn.close()
            raise StoreUnavailable(explain(exc, path)) from None
        db = cls(path, writer, conns[:-1], conns[-1], sealer)
        db._busy_timeout_ms = busy_timeout_ms
        await db.prepare(migrate=migrate)
        return db

    async def prepare(self, *, migrate: bool) -> None:
        """Apply pending migrations (``migrate``) and bind the key store; closes the
        database and raises if either fails."""
        from picobot.store.keys.binding import bind_key_store

        try:
            if migrate:
                from picobot.store.migrations import apply_migrations

                await apply_migrations(self)
            await bind_key_store(self, write=migrate)
        except BaseException:
            await self.close()
            raise

    @property
    def reader_threads(self) -> int:
        """How many reader connections (threads) serve :meth:`read`."""
        return len(self._readers)

    async def close(self) -> None:
        """Finish accepted work, checkpoint the WAL, close every connection; idempotent."""
        if self._closed:
            return
        self._closed = True
        async with self._write_lock:
            pass  # a caller committing its own write is done (it started before us)
        if self._flusher is not None:
            # Writes already accepted are committed (or fail) before the connections go.
            try:
                await self._flusher
            except Exception:
                log.exception("pending writes failed while closing %s", self.engine.where)
        if self._spill is not None:
            self._spill.cancel()
        for _, future in self._read_queue:
            if not future.done():
                future.set_exception(StoreUnavailable(f"database {self.engine.where} is closed"))
        self._read_queue.clear()
        if self._read_tasks:  # reads already handed to a reader finish first
            await asyncio.gather(*self._read_tasks, return_exceptions=True)
        # The readers go first, so the checkpoint never waits for our own read snapshot.
        for reader in self._readers:
            await reader.close()
        async with self._checkpoint_lock:  # a passive checkpoint under way ends first
            await self._maintenance.close()
        try:
            if self.engine.file and await self._truncate_wal():
                log.warning("WAL checkpoint on close: another connection is still reading")
        except StoreUnavailable as exc:
            log.warning("WAL checkpoint on close failed: %s", exc)
        finally:
            await self._writer.close()

    async def checkpoint_passive(self) -> int:
        """Copy what it can of the WAL into the database without blocking anyone.

        Run periodically by the runtime, since automatic checkpoints are off. Uses its
        own connection, so neither the writer lock nor the reader is held. Returns the
        number of WAL frames still not checkpointed (readers may pin some).
        """
        async with self._checkpoint_lock:
            if self._closed or not self.engine.file:
                return 0
            try:
                rows = await pragma(self._maintenance, "wal_checkpoint(PASSIVE)")
            except self.engine.errors as exc:
                raise StoreUnavailable(self.engine.explain(exc)) from None
        _busy, log_frames, done = (int(v) for v in rows[0]) if rows else (0, 0, 0)
        return max(0, log_frames - done)

    async def checkpoint(self) -> None:
        """Copy the whole WAL into the database file and truncate the WAL to 0 bytes.

        The WAL keeps old page images (including deleted text) until a checkpoint
        overwrites or truncates it. Runs under the writer lock, outside any transaction;
        SQLite waits up to the busy timeout for readers that still use WAL frames. Raises
        StoreUnavailable when the WAL could not be emptied (a reader, possibly in another
        process, kept an old snapshot open).
        """
        if self.engine.file and await self._truncate_wal():
            raise StoreUnavailable(
                f"database {self.path}: the WAL could not be checkpointed because another"
                " connection is still reading; deleted data stays in the WAL until the next"
                " checkpoint"
            )

    async def _truncate_wal(self) -> bool:
        """Run a TRUNCATE checkpoint under the writer lock; True if it stayed blocked.

        SQLite waits (busy timeout) for readers, but answers "busy" at once when another
        checkpoint runs: ours are kept apart by a lock, taken before the writer's (writes
        go on during our passive one); another process's is retried for the busy timeout.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._busy_timeout_ms / 1000
        async with self._checkpoint_lock, self._write_lock:
            while True:
                try:
                    rows = await pragma(self._writer, "wal_checkpoint(TRUNCATE)")
                except self.engine.errors as exc:
                    raise StoreUnavailable(self.engine.explain(exc)) from None
                if rows and not int(rows[0][0]):
                    return False
                if loop.time() >= deadline:
                    return True
                await asyncio.sleep(0.02)

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
            except self.engine.errors as exc:
                raise StoreUnavailable(self.engine.explain(exc)) from None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        """One serialized write transaction; commits on success, rolls back on error."""
        async with self._write_lock:
            self.sealer.refresh()  # another process's key deletion holds from here on
            try:
                await self._writer.execute("BEGIN IMMEDIATE")
            except self.engine.errors as exc:
                raise StoreUnavailable(self.engine.explain(exc)) from None
            except asyncio.CancelledError:
                # The BEGIN may still run in the writer's thread; undo it (queued behind
                # it), or every later write on this connection would fail.
                await self._rollback()
                raise
            try:
                yield self._writer
            except self.engine.unavailable as exc:
                # Locked, read-only, full disk: the write is undone and nothing is lost.
                await self._rollback()
                raise StoreUnavailable(self.engine.explain(exc)) from None
            except BaseException:
                await self._rollback()
                raise
            try:
                await self._writer.commit()
            except self.engine.errors as exc:
                await self._rollback()
                raise StoreUnavailable(self.engine.explain(exc)) from None

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in a committed write transaction; return its result.

        ``fn`` runs in the writer thread on the plain ``sqlite3`` connection, possibly in
        the same transaction as other callers' functions (group commit; see the module
        docstring), inside its own SAVEPOINT. It must not BEGIN, COMMIT or ROLLBACK.
        Errors ``fn`` raises come back to this caller only (an ``OperationalError`` as
        :class:`StoreUnavailable`); a failed COMMIT fails every function of the batch,
        and none of their writes is kept.
        """
        if self._closed:
            raise StoreUnavailable(f"database {self.engine.where} is closed")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        if self._flusher is not None or self._leading:
            self._pending.append((fn, future))  # committed by the next batch
            return await future
        # The writer is idle: this caller commits its write itself, in its own task (two
        # trips through the event loop fewer than a flusher task's). Writes that arrive
        # meanwhile queue for a flusher, started as soon as this one is done.
        self._leading = True
        try:
            await self._run_batch([(fn, future)])
        except BaseException:  # cancelled: the caller gets that, not the batch's outcome
            if future.done() and not future.cancelled():
                future.exception()  # retrieved, so it is not reported as lost
            raise
        finally:
            self._leading = False
            if self._pending:
                self._flusher = asyncio.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        """Run the pending write functions, a batch at a time, until none is left."""
        try:
            while self._pending:
                batch = [job for job in self._pending[:MAX_BATCH] if not job[1].cancelled()]
                del self._pending[:MAX_BATCH]
                if batch:
                    await self._run_batch(batch)
        finally:
            self._flusher = None

    async def _run_batch(self, batch: list[tuple[WriteFn, asyncio.Future[Any]]]) -> None:
        fns = [fn for fn, _ in batch]
        async with self._write_lock:
            try:
                # One trip to the writer thread for the whole batch.
                outcomes = await self._writer.run(self._commit_batch, fns)
            except self.engine.errors as exc:
                error = StoreUnavailable(self.engine.explain(exc))
                outcomes = [(False, error)] * len(batch)
            except BaseException as exc:  # cancelled while waiting: the batch is unknown
                for _, future in batch:
                    if not future.done():
                        future.set_exception(
                            StoreUnavailable(f"database {self.engine.where}: write interrupted")
                        )
                if isinstance(exc, Exception):
                    log.exception("group commit failed on %s", self.engine.where)
                    return
                raise
        self._settle(batch, outcomes)

    def _settle(
        self, batch: list[tuple[WriteFn, asyncio.Future[Any]]], outcomes: list[tuple[bool, Any]]
    ) -> None:
        """Hand each caller its result or error (SQLite's operational ones explained)."""
        for (_, future), (ok, value) in zip(batch, outcomes, strict=True):
            if future.done():
                continue
            if ok:
                future.set_result(value)
            elif isinstance(value, self.engine.unavailable):
                future.set_exception(StoreUnavailable(self.engine.explain(value)))
            elif isinstance(value, (ValueError, *self.engine.misuse)) and "closed" in str(value):
                # The connection closed under the request (sqlite3's words).
                future.set_exception(StoreUnavailable(f"database {self.engine.where} is closed"))
            else:
                future.set_exception(value)

    async def _rollback(self) -> None:
        try:
            await self._writer.rollback()
        except self.engine.errors:
            log.exception("rollback failed on %s", self.engine.where)

    async def execute_write(self, sql: str, params: Iterable[Any] = ()) -> int:
        """Run one write statement, committed (a :meth:`write`); return the rows it changed."""
        args = tuple(params)
        return await self.write(lambda conn: conn.execute(sql, args).rowcount)

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` on a reader connection, in one read transaction.

        Every statement of ``fn`` sees the same snapshot, which includes every commit
        made before the call. ``fn`` runs in a reader's thread on the plain ``sqlite3``
        connection and must only read. Reads that queue while the readers are busy go
        to the next one free together, in one trip: under load a trip to a thread costs
        more than most queries.
        """
        if self._closed:
            raise StoreUnavailable(f"database {self.engine.where} is closed")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._read_queue.append((fn, future))
        self._dispatch_reads()
        return await future

    def _dispatch_reads(self) -> None:
        """Hand queued reads to the first idle reader; to a spare one only once the
        readers before it are slow (:data:`SPILL_SECS`)."""
        loop = asyncio.get_running_loop()
        while self._read_queue and self._idle_readers:
            index = min(self._idle_readers)
            spill_at = max(
                (self._busy_since[i] + SPILL_SECS * self._batch_len[i] for i in range(index)),
                default=0.0,
            )
            wait = spill_at - loop.time()
            if wait > 0:
                # One timer at a time: one that fires early (the reader before took
                # another batch meanwhile) just sets the next.
                if self._spill is None:
                    self._spill = loop.call_later(wait, self._spill_reads)
                return
            batch = [job for job in self._read_queue[:MAX_BATCH] if not job[1].cancelled()]
            del self._read_queue[:MAX_BATCH]
            if batch:
                self._idle_readers.remove(index)
                self._busy_since[index] = loop.time()
                self._batch_len[index] = len(batch)
                task = asyncio.create_task(self._run_reads(index, batch))
                self._read_tasks.add(task)
                task.add_done_callback(self._read_tasks.discard)

    def _read_batch(self, conn: sqlite3.Connection, fns: list[WriteFn]) -> list[tuple[bool, Any]]:
        # In the reader's thread, as the batch begins: a key another process deleted
        # before these reads began opens nothing in them (a check off the event loop).
        self.sealer.refresh()
        return read_batch(conn, fns)

    def _commit_batch(self, conn: sqlite3.Connection, fns: list[WriteFn]) -> list[tuple[bool, Any]]:
        self.sealer.refresh()  # as for reads; each seal checks again (KeyRing.key)
        return group_commit(conn, fns)

    def _spill_reads(self) -> None:
        self._spill = None
        self._dispatch_reads()

    async def _run_reads(
        self, index: int, batch: list[tuple[WriteFn, asyncio.Future[Any]]]
    ) -> None:
        reader = self._readers[index]
        try:
            outcomes = await reader.run(self._read_batch, [fn for fn, _ in batch])
        except Exception as exc:
            outcomes = [(False, exc)] * len(batch)
        except BaseException:  # cancelled (shutting down): nobody is left waiting quietly
            for _, future in batch:
                if not future.done():
                    future.set_exception(
                        StoreUnavailable(f"database {self.engine.where}: read interrupted")
                    )
            raise
        finally:
            self._idle_readers.append(index)
            self._dispatch_reads()
        self._settle(batch, outcomes)

    async def fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[Row]:
        """Run a query on a reader connection."""
        args = tuple(params)
        # One job in a reader's thread: the statement runs to completion before any other
        # read starts there (an open cursor would pin the WAL snapshot for later reads).
        return await self.read(lambda conn: conn.execute(sql, args).fetchall())

    async def fetchone(self, sql: str, params: Iterable[Any] = ()) -> Row | None:
        """First row of a query, or None."""
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    async def ping(self) -> None:
        """Raise if a reader connection cannot run a query (a health check)."""
        await self.fetchone("SELECT 1")
