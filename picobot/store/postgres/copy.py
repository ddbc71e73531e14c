"""Copying a SQLite store to PostgreSQL (``picobot store copy``), resumably and verified.

The copy moves a data directory's store to a PostgreSQL database that PicoBot then uses
instead (``[store] url``). In order:

1. Preconditions, checked before anything is written: the SQLite file has the current
   schema, no sealed column holds a user's text in clear (``picobot migrate`` seals
   it), and the key store ``keys.db`` exists (a PostgreSQL store is always sealed).
2. The key store: its ``meta`` and ``user_keys`` rows go into the schema
   ``picobot_keys`` unchanged (same key ids, same wrapped keys, same store id), so the
   same master key opens the copy and every sealed value copies as its bytes. A target
   whose key store has another id is refused.
3. The tables, parents before children, with PostgreSQL's ``COPY``. A table is copied
   in batches of SQLite rowids, each batch in one transaction with the progress row
   that records it (:data:`PROGRESS_TABLE`), so a copy killed anywhere resumes after
   the last batch committed: no row is lost or copied twice. Tables without a rowid,
   tables whose rows reference other rows of the same table, and tables the target's
   triggers fill (``memory_revisions``, ``fact_revisions``, ``revision_clock``) are
   copied whole in one transaction, replacing what is there. ``store_meta`` is merged.
4. Identity sequences are moved past the largest id (and past SQLite's AUTOINCREMENT
   counters), then every table's row count and checksum (:func:`table_checksum`) are
   compared on both sides; only a copy that matches drops the progress table.

Not copied: the recall index (FTS5 tables and ``search_pending``), ``_migrations``
(the target has its own) and ``sqlite_sequence``. The target's insert triggers queue
every copied message, note, fact and digest in ``search_pending``, and the background
indexer rebuilds the index from there under the same keys.

A target that holds a store and no progress table (a finished copy, or a store in use)
is refused: a second copy never writes into it.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from picobot.config.keys import KeySettings
from picobot.errors import StoreUnavailable, UserError
from picobot.store.db import Database
from picobot.store.keys import open_keyring
from picobot.store.keys.backfill import count_clear
from picobot.store.keys.keyring import KEY_STORE_FILE, KeyRing
from picobot.store.migrations import schema_state
from picobot.store.postgres.connect import CONNECT_TIMEOUT_SECS, explain, redacted
from picobot.store.postgres.driver import WRITER_LOCK
from picobot.store.postgres.keyring import SCHEMA as KEYS_SCHEMA
from picobot.store.postgres.keyring import connect_keys, create_key_tables
from picobot.store.postgres.schema import EXTRA_COLUMNS, existing_tables, table_names

BATCH_ROWS = 5000
"""Rows per batch (and per transaction) of a table copied in batches."""

PROGRESS_TABLE = "store_copy_progress"
"""The target's record of a copy under way: per table, the last SQLite rowid copied and
whether it is done. It holds no user content and is dropped once the copy is verified."""

NOT_COPIED = frozenset({"_migrations", "search_index", "search_terms", "search_pending"})
"""Tables the target makes for itself (the recall index is rebuilt by its indexer)."""

MERGED = frozenset({"store_meta"})
"""Tables whose source rows are upserted over the target's own."""

TRIGGER_FILLED = frozenset({"memory_revisions", "fact_revisions", "revision_clock"})
"""Tables the target's triggers write while notes and facts are copied: replaced with the
source's rows once those are in."""

_CHECKSUM_MOD = 2**256
_INT, _FLOAT, _TEXT, _BYTES = "int", "float", "text", "bytes"
_KINDS = {
    "bigint": _INT,
    "integer": _INT,
    "smallint": _INT,
    "double precision": _FLOAT,
    "real": _FLOAT,
    "text": _TEXT,
    "bytea": _BYTES,
}

Progress = Callable[[str, int], None]
"""Hears ``(table, rows of it copied so far)`` after each committed batch (counting the
rows an interrupted run copied)."""


class CopyError(UserError):
    """The copy cannot start or did not verify; the message says what to do."""


@dataclass(frozen=True)
class TableCopy:
    """One table as verified: its rows on both sides and their checksum."""

    name: str
    rows: int
    checksum: str
    """The hex of :func:`table_checksum`, equal on both sides."""


@dataclass(frozen=True)
class CopyReport:
    """What a finished copy did: the whole store, not only what this run copied."""

    source: str
    target: str
    """The target's URL without its password."""
    user_keys: int
    tables: list[TableCopy]
    seconds: float
    resumed: bool
    """Whether this run finished a copy an earlier run had begun."""
    queued: int
    """Records waiting in the target's ``search_pending`` for the background indexer."""

    @property
    def rows(self) -> int:
        """Rows of every copied table."""
        return sum(t.rows for t in self.tables)


@dataclass(frozen=True)
class _Table:
    """A table to copy: its columns (SQLite's, in order) and how it is copied."""

    name: str
    columns: tuple[str, ...]
    kinds: tuple[str, ...]
    whole: bool
    """Copied in one transaction (no rowid, a self-reference, or trigger-filled)."""

    @property
    def column_list(self) -> str:
        return ", ".join(self.columns)


def _encode(value: Any) -> bytes:
    """A value's canonical bytes: a type tag, then an unambiguous encoding."""
    if value is None:
        return b"N"
    if isinstance(value, bool | int):
        return b"i" + str(int(value)).encode()
    if isinstance(value, float):
        return b"f" + value.hex().encode()
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        return b"s" + struct.pack(">Q", len(data)) + data
    data = bytes(value)
    return b"b" + struct.pack(">Q", len(data)) + data


def table_checksum(rows: Iterable[Sequence[Any]]) -> tuple[int, int]:
    """``(row count, checksum)`` of ``rows``: the sum mod 2**256 of each row's SHA-256
    over its canonical encoding, so the order rows are read in does not matter.

    Both sides pass rows through :func:`_convert` first (what the copy writes), so a
    value counts as equal when the target holds what the copy made of the source's.
    """
    count = 0
    total = 0
    for row in rows:
        digest = hashlib.sha256(b"".join(_encode(v) for v in row)).digest()
        total = (total + int.from_bytes(digest, "big")) % _CHECKSUM_MOD
        count += 1
    return count, total


def _value(value: Any, kind: str) -> Any:
    """``value`` as the target column of ``kind`` holds it. Raises ValueError for one it
    cannot hold (a text in clear in a sealed column, a fraction in an integer one)."""
    if value is None:
        return None
    if kind == _BYTES:
        if isinstance(value, str):
            if value:
                raise ValueError("a text in clear")
            return b""  # the empty text is stored unsealed
        return bytes(value)
    if kind == _INT:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if not isinstance(value, int):
            raise ValueError(f"a {type(value).__name__} in an integer column")
        return value
    if kind == _FLOAT:
        if not isinstance(value, int | float):
            raise ValueError(f"a {type(value).__name__} in a real column")
        return float(value)
    if not isinstance(value, str):
        if isinstance(value, bytes):
            raise ValueError("bytes in a text column")
        return str(value)
    return value


def _convert(table: _Table, rows: Iterable[Sequence[Any]]) -> Iterator[tuple[Any, ...]]:
    """``rows`` of ``table`` as the target stores them. Raises CopyError naming the
    table and column of a value it cannot hold."""
    for row in rows:
        out = []
        for value, kind, column in zip(row, table.kinds, table.columns, strict=True):
            try:
                out.append(_value(value, kind))
            except ValueError as exc:
                raise CopyError(
                    f"{table.name}.{column} holds {exc}, which the PostgreSQL store cannot"
                    " hold; run `picobot migrate` and copy again"
                ) from None
        yield tuple(out)


class StoreCopy:
    """One copy of the data directory's SQLite store to the PostgreSQL database at
    ``url``; :meth:`run` does it (again, to resume) and returns the verified report.

    ``key_settings`` and ``environ`` say where the master key comes from, as for the
    server: the copy's key store is opened with the same key.
    """

    def __init__(
        self,
        db_path: Path,
        url: str,
        *,
        key_settings: KeySettings,
        environ: Mapping[str, str] | None = None,
        batch_rows: int = BATCH_ROWS,
        progress: Progress | None = None,
    ) -> None:
        self.db_path = db_path
        self.data_dir = db_path.parent
        self.url = url
        self.where = redacted(url)
        self.key_settings = key_settings
        self.environ = environ
        self.batch_rows = batch_rows
        self.progress = progress
        # Set when run() is cancelled (Ctrl+C): the copying thread stops at the next batch.
        self._stopping = threading.Event()

    # --- the whole copy ---------------------------------------------------------------

    async def run(self) -> CopyReport:
        """Check the preconditions, copy the keys, then the tables, then verify.

        Raises CopyError (nothing written when a precondition fails), ConfigError for a
        master key that does not open the key store, StoreUnavailable when either
        database cannot be used. Interrupted anywhere, a later run resumes the copy.
        """
        started = time.monotonic()
        ring = self._source_keys()
        try:
            await self._check_source(ring)
            resumed = await asyncio.to_thread(self._copy_keys, ring)
        except psycopg.Error as exc:
            raise StoreUnavailable(explain(exc, self.url)) from None
        finally:
            ring.close()
        await self._open_target()
        try:
            tables, queued, keys = await asyncio.to_thread(self._copy_tables)
        except asyncio.CancelledError:
            self._stopping.set()
            raise
        except psycopg.Error as exc:
            raise StoreUnavailable(explain(exc, self.url)) from None
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot read {self.db_path}: {exc}") from None
        return CopyReport(
            source=str(self.db_path),
            target=self.where,
            user_keys=keys,
            tables=tables,
            seconds=time.monotonic() - started,
            resumed=resumed,
            queued=queued,
        )

    def _source_keys(self) -> KeyRing:
        """The SQLite key store, opened with the master key; it must exist."""
        if not self.db_path.is_file():
            raise CopyError(f"no database at {self.db_path}: nothing to copy")
        store = self.data_dir / KEY_STORE_FILE
        if not store.is_file():
            raise CopyError(
                f"no key store at {store}: a PostgreSQL store keeps every text sealed;"
                " run `picobot migrate` to make the key store and seal the texts first"
            )
        return open_keyring(self.data_dir, self.key_settings, self.environ)

    async def _check_source(self, ring: KeyRing) -> None:
        """Raise CopyError unless the source's schema is current and nothing is in clear."""
        db = await Database.open(self.db_path, keys=ring, migrate=False, readers=1)
        try:
            state = await schema_state(db)
            if state.current != state.known:
                raise CopyError(
                    f"database {self.db_path} has schema version {state.current} and this"
                    f" PicoBot's is {state.known}: "
                    + (
                        "run `picobot migrate` first"
                        if state.behind
                        else "copy it with the PicoBot that upgraded it"
                    )
                )
            clear = await count_clear(db)
            if clear:
                raise CopyError(
                    f"database {self.db_path} still holds {clear:,} texts in clear: run"
                    " `picobot migrate` to seal them, then copy"
                )
        finally:
            await db.close()

    async def _open_target(self) -> None:
        """Create the store's schema on the target (if missing) and bind it to the copied
        key store, as the server would on its first start."""
        ring = open_keyring(self.data_dir, self.key_settings, self.environ, url=self.url)
        try:
            db = await Database.open(self.db_path, url=self.url, keys=ring, readers=1)
            await db.close()
        finally:
            ring.close()

    # --- keys ---------------------------------------------------------------------------

    def _copy_keys(self, ring: KeyRing) -> bool:
        """Copy the key store's rows and make the progress table; whether a copy was
        under way already. Raises CopyError for a target that is not this copy's."""
        with closing(self._connect_source(self.data_dir / KEY_STORE_FILE)) as src:
            meta = [(str(n), _as_bytes(v)) for n, v in src.execute("SELECT name, value FROM meta")]
            keys = [
                (int(k), str(u), bytes(w), float(c))
                for k, u, w, c in src.execute(
                    "SELECT kid, user_id, wrapped, created_at FROM user_keys ORDER BY kid"
                )
            ]
        with closing(self._connect_target()) as pg:
            under_way = self._has_progress(pg)
            if not under_way and existing_tables(pg):
                raise CopyError(
                    f"{self.where} already holds a PicoBot store (a finished copy, or a store"
                    " in use): nothing copied. Copy into an empty database"
                )
            target_id = self._target_store_id(pg)
            if target_id is not None and target_id != ring.store_id:
                raise CopyError(
                    f"{self.where} has key store {target_id} (schema {KEYS_SCHEMA}), not this"
                    f" data directory's ({ring.store_id}): nothing copied. Copy into an"
                    " empty database"
                )
        try:
            keys_conn = connect_keys(self.url)
        except psycopg.Error as exc:
            raise StoreUnavailable(explain(exc, self.url)) from None
        with closing(keys_conn), keys_conn.transaction():
            create_key_tables(keys_conn)
            with keys_conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO meta (name, value) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                    meta,
                )
                cur.executemany(
                    "INSERT INTO user_keys (kid, user_id, wrapped, created_at)"
                    " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    keys,
                )
            found = set(
                keys_conn.execute(
                    "SELECT kid, user_id, wrapped, created_at FROM user_keys"
                ).fetchall()
            )
            missing = [k for k in keys if k not in found]
            if missing:
                raise CopyError(
                    f"{self.where}'s key store holds other keys under the ids of"
                    f" {len(missing)} of this data directory's: nothing copied. Copy"
                    " into an empty database"
                )
        with closing(self._connect_target()) as pg, pg.transaction():
            pg.execute(
                f"CREATE TABLE IF NOT EXISTS {PROGRESS_TABLE} (table_name TEXT PRIMARY KEY,"
                " last_rowid BIGINT, done BOOLEAN NOT NULL DEFAULT false)"
            )
        return under_way

    @staticmethod
    def _has_progress(pg: psycopg.Connection[Any]) -> bool:
        row = pg.execute("SELECT to_regclass(%s)", (PROGRESS_TABLE,)).fetchone()
        return row is not None and row[0] is not None

    @staticmethod
    def _target_store_id(pg: psycopg.Connection[Any]) -> str | None:
        """The id of the key store already in the target, if any."""
        row = pg.execute("SELECT to_regclass(%s)", (f"{KEYS_SCHEMA}.meta",)).fetchone()
        if row is None or row[0] is None:
            return None
        found = pg.execute(
            f"SELECT value FROM {KEYS_SCHEMA}.meta WHERE name = 'store_id'"  # noqa: S608
        ).fetchone()
        return None if found is None else _as_bytes(found[0]).decode()

    # --- tables -------------------------------------------------------------------------

    def _copy_tables(self) -> tuple[list[TableCopy], int, int]:
        """Copy what is left, set the sequences, verify; (tables, queued, user keys)."""
        with (
            closing(self._connect_source(self.db_path)) as src,
            closing(self._connect_target()) as pg,
        ):
            src.execute("BEGIN")  # one snapshot of the source throughout
            tables = self._plan(src, pg)
            state = self._state(pg, tables)
            for table in tables:
                last, done = state.get(table.name, (None, False))
                if done:
                    continue
                self._check_stop()
                try:
                    if table.name in MERGED:
                        self._merge(src, pg, table)
                    elif table.whole:
                        self._copy_whole(src, pg, table)
                    else:
                        self._copy_batches(src, pg, table, last)
                except psycopg.DataError as exc:  # a value PostgreSQL refuses (a NUL)
                    first = str(exc).strip().splitlines()[0]
                    raise CopyError(f"table {table.name} cannot be copied: {first}") from None
            return self._finish(src, pg, tables)

    def _plan(self, src: sqlite3.Connection, pg: psycopg.Connection[Any]) -> list[_Table]:
        """The tables to copy, parents first, with the target's column kinds."""
        plan = []
        for name in table_names():
            if name in NOT_COPIED:
                continue
            columns = tuple(str(r[1]) for r in src.execute(f"PRAGMA table_info({name})"))
            target = dict(
                pg.execute(
                    "SELECT column_name, data_type FROM information_schema.columns"
                    " WHERE table_schema = current_schema() AND table_name = %s",
                    (name,),
                ).fetchall()
            )
            extra = set(EXTRA_COLUMNS.get(name, ()))
            if set(columns) != set(target) - extra:
                raise CopyError(
                    f"table {name} has other columns in {self.db_path} than in the"
                    " PostgreSQL schema: this PicoBot cannot copy it"
                )
            sql = src.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
            ).fetchone()[0]
            self_ref = any(
                str(r[2]) == name for r in src.execute(f"PRAGMA foreign_key_list({name})")
            )
            whole = (
                self_ref
                or name in TRIGGER_FILLED
                or re.search(r"WITHOUT\s+ROWID", str(sql), re.IGNORECASE) is not None
            )
            kinds = tuple(_KINDS[str(target[c])] for c in columns)
            plan.append(_Table(name, columns, kinds, whole))
        return plan

    @staticmethod
    def _state(
        pg: psycopg.Connection[Any], tables: list[_Table]
    ) -> dict[str, tuple[int | None, bool]]:
        """The progress rows (made for tables met the first time): table -> (last rowid
        copied, done)."""
        with pg.transaction():
            with pg.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {PROGRESS_TABLE} (table_name) VALUES (%s)"  # noqa: S608
                    " ON CONFLICT DO NOTHING",
                    [(t.name,) for t in tables],
                )
            rows = pg.execute(
                f"SELECT table_name, last_rowid, done FROM {PROGRESS_TABLE}"  # noqa: S608
            ).fetchall()
        return {str(n): (last, bool(done)) for n, last, done in rows}

    @staticmethod
    def _write(pg: psycopg.Connection[Any], table: _Table, rows: Iterable[Sequence[Any]]) -> int:
        """COPY ``rows`` into ``table`` (in the caller's transaction); how many."""
        written = 0
        with (
            pg.cursor() as cur,
            cur.copy(f"COPY {table.name} ({table.column_list}) FROM STDIN") as copy,
        ):
            for row in _convert(table, rows):
                copy.write_row(row)
                written += 1
        return written

    def _check_stop(self) -> None:
        """Raise CopyError once :meth:`run` was cancelled (between two transactions)."""
        if self._stopping.is_set():
            raise CopyError("the copy was interrupted; run it again to resume")

    @staticmethod
    def _begin(pg: psycopg.Connection[Any]) -> None:
        """The writer lock of the store (no instance writes meanwhile); foreign keys
        checked at commit, when every row of the transaction is in."""
        pg.execute("SELECT pg_advisory_xact_lock(%s)", (WRITER_LOCK,))
        pg.execute("SET CONSTRAINTS ALL DEFERRED")

    @staticmethod
    def _mark(pg: psycopg.Connection[Any], table: _Table, last: int | None, done: bool) -> None:
        pg.execute(
            f"UPDATE {PROGRESS_TABLE} SET last_rowid = %s, done = %s"  # noqa: S608
            " WHERE table_name = %s",
            (last, done, table.name),
        )

    def _copy_batches(
        self, src: sqlite3.Connection, pg: psycopg.Connection[Any], table: _Table, last: int | None
    ) -> None:
        """Copy ``table`` after rowid ``last``, one transaction per batch with its
        progress row, then mark it done."""
        after = -(2**63) if last is None else last
        copied = int(
            src.execute(
                f"SELECT COUNT(*) FROM {table.name} WHERE rowid <= ?",  # noqa: S608
                (after,),
            ).fetchone()[0]
        )
        query = (
            f"SELECT rowid, {table.column_list} FROM {table.name}"  # noqa: S608
            " WHERE rowid > ? ORDER BY rowid LIMIT ?"
        )
        while True:
            self._check_stop()
            rows = src.execute(query, (after, self.batch_rows)).fetchall()
            if not rows:
                break
            after = int(rows[-1][0])
            with pg.transaction():
                self._begin(pg)
                self._write(pg, table, (r[1:] for r in rows))
                self._mark(pg, table, after, False)
            copied += len(rows)
            if self.progress is not None:
                self.progress(table.name, copied)
        with pg.transaction():
            self._mark(pg, table, None if after == -(2**63) else after, True)

    def _copy_whole(
        self, src: sqlite3.Connection, pg: psycopg.Connection[Any], table: _Table
    ) -> None:
        """Replace ``table``'s rows with the source's, in one transaction."""
        rows = src.execute(f"SELECT {table.column_list} FROM {table.name}")  # noqa: S608
        with pg.transaction():
            self._begin(pg)
            pg.execute(f"DELETE FROM {table.name}")  # noqa: S608 - trigger-made rows
            written = self._write(pg, table, rows)
            self._mark(pg, table, None, True)
        if self.progress is not None and written:
            self.progress(table.name, written)

    def _merge(self, src: sqlite3.Connection, pg: psycopg.Connection[Any], table: _Table) -> None:
        """Upsert the source's rows of a ``name``/``value`` table over the target's."""
        rows = list(_convert(table, src.execute(f"SELECT name, value FROM {table.name}")))  # noqa: S608
        with pg.transaction():
            self._begin(pg)
            with pg.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {table.name} (name, value) VALUES (%s, %s)"  # noqa: S608
                    " ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                    rows,
                )
            self._mark(pg, table, None, True)

    # --- finishing ----------------------------------------------------------------------

    def _finish(
        self, src: sqlite3.Connection, pg: psycopg.Connection[Any], tables: list[_Table]
    ) -> tuple[list[TableCopy], int, int]:
        """Set the sequences and verify every table in one transaction, which drops the
        progress table when all match. Raises CopyError naming the tables that differ."""
        counters = self._autoincrement(src)
        report: list[TableCopy] = []
        wrong: list[str] = []
        with pg.transaction():
            self._begin(pg)
            self._set_sequences(pg, counters)
            for table in tables:
                where = ""
                names: list[str] = []
                if table.name in MERGED:
                    names = [str(r[0]) for r in src.execute(f"SELECT name FROM {table.name}")]  # noqa: S608
                    where = " WHERE name = ANY(%s)"
                select = f"SELECT {table.column_list} FROM {table.name}"  # noqa: S608
                ours = table_checksum(_convert(table, src.execute(select)))
                with pg.cursor(name=f"verify_{table.name}") as cur:
                    cur.itersize = self.batch_rows
                    cur.execute(select + where, (names,) if where else None)
                    theirs = table_checksum(_convert(table, cur))
                if ours != theirs:
                    wrong.append(
                        f"{table.name} ({ours[0]:,} rows in SQLite, {theirs[0]:,} copied)"
                        if ours[0] != theirs[0]
                        else f"{table.name} (same {ours[0]:,} rows, other contents)"
                    )
                report.append(TableCopy(table.name, ours[0], f"{ours[1]:064x}"))
            if wrong:
                raise CopyError(
                    f"the copy in {self.where} does not match the source: {'; '.join(wrong)}."
                    " Was the SQLite store used between runs? Empty the target database"
                    " and copy again"
                )
            queued = _count(pg, "search_pending")
            keys = _count(pg, f"{KEYS_SCHEMA}.user_keys")
            pg.execute(f"DROP TABLE {PROGRESS_TABLE}")
        return report, queued, keys

    @staticmethod
    def _autoincrement(src: sqlite3.Connection) -> dict[str, int]:
        """SQLite's AUTOINCREMENT counters: ids never handed out again, even deleted."""
        found = src.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'"
        ).fetchone()
        if found is None:
            return {}
        return {str(n): int(s) for n, s in src.execute("SELECT name, seq FROM sqlite_sequence")}

    @staticmethod
    def _set_sequences(pg: psycopg.Connection[Any], counters: Mapping[str, int]) -> None:
        """Move every identity sequence past its table's largest id (and past the
        source's AUTOINCREMENT counter), so new rows never take a copied id."""
        identities = pg.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND is_identity = 'YES'"
            " AND identity_generation = 'BY DEFAULT'"
        ).fetchall()
        for table, column in identities:
            top = pg.execute(f"SELECT MAX({column}) FROM {table}").fetchone()  # noqa: S608
            highest = max(int(top[0] or 0) if top else 0, counters.get(str(table), 0))
            if highest > 0:
                pg.execute(
                    "SELECT setval(pg_get_serial_sequence(%s, %s), %s)",
                    (str(table), str(column), highest),
                )

    # --- connections --------------------------------------------------------------------

    @staticmethod
    def _connect_source(path: Path) -> sqlite3.Connection:
        """A read-only connection to the SQLite file ``path``; autocommit, so reads
        begin their own transaction."""
        try:
            return sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None
            )
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot read {path}: {exc}") from None

    def _connect_target(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(
                self.url,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_SECS,
                application_name="picobot-store-copy",
            )
        except psycopg.Error as exc:
            raise StoreUnavailable(explain(exc, self.url)) from None


def _count(pg: psycopg.Connection[Any], table: str) -> int:
    """Rows of the target's ``table``."""
    row = pg.execute(f"SELECT COUNT(*) FROM {table}").fetchone()  # noqa: S608 - our names
    return 0 if row is None else int(row[0])


def _as_bytes(value: Any) -> bytes:
    """A key store ``meta`` value as bytes (SQLite may give either form)."""
    return value.encode() if isinstance(value, str) else bytes(value)
