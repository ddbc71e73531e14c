"""A psycopg connection that runs the store's statements as ``sqlite3`` would.

The store's operations are plain functions of a connection (``conn.execute(sql,
params).fetchall()``, rows read by index or by name). :class:`PgConnection` gives them
that on PostgreSQL: each statement is rewritten by :mod:`picobot.store.postgres.dialect`,
run through psycopg's raw cursor (``$n`` placeholders), its computed parameters sealed
with the user's key and its opened columns opened, as the SQL functions do on SQLite.
Numbers come back as ``int`` and ``float`` (PostgreSQL's ``numeric`` sums as well).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from typing import Any, ClassVar

import psycopg

from picobot.store.keys.sealing import Sealer
from picobot.store.postgres.dialect import Computed, Opened, Statement, translate

WRITER_LOCK = 0x7069636F626F74
"""The advisory lock a write transaction holds to its end: writes are serialized across
every instance on the database, as SQLite's one writer serializes them on a file (the
store's operations read, then write, relying on that)."""


class Row(tuple[Any, ...]):
    """A row read by position or, case-insensitively, by column name (as ``sqlite3.Row``)."""

    names: ClassVar[dict[str, int]] = {}

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                return super().__getitem__(self.names[key.lower()])
            except KeyError:
                raise IndexError(f"No item with that key: {key}") from None
        return super().__getitem__(key)

    def keys(self) -> list[str]:
        """The column names, in order."""
        return list(self.names)


@functools.lru_cache(maxsize=1024)
def _row_type(names: tuple[str, ...]) -> type[Row]:
    """One :class:`Row` subclass per column layout: the names live on the class."""
    return type("Row", (Row,), {"names": {n.lower(): i for i, n in enumerate(names)}})


def _number(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _opened(sealer: Sealer, how: Opened, value: Any) -> Any:
    """A sealed column's value as the store reads it (an emptied text, empty bytes in
    ``BYTEA``, opens as ``''``: :meth:`Sealer.open`)."""
    return sealer.open_bytes(value) if how is Opened.BYTES else sealer.open(value)


class PgCursor:
    """The outcome of one statement: rows (opened), ``rowcount``."""

    def __init__(self, cursor: psycopg.Cursor[Any], statement: Statement, sealer: Sealer):
        self._cursor = cursor
        self._statement = statement
        self._sealer = sealer
        description = cursor.description
        self._type: type[Row] | None = None
        self._open: list[tuple[int, Opened]] = []
        if description is not None:
            names = tuple(d.name for d in description)
            self._type = _row_type(names)
            self._open = [
                (i, statement.opened[n.lower()])
                for i, n in enumerate(names)
                if n.lower() in statement.opened
            ]

    @property
    def rowcount(self) -> int:
        """Rows the statement changed or returned."""
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> None:
        """Never known on PostgreSQL: the store reads new ids with ``RETURNING``."""
        return None

    def _row(self, values: Sequence[Any]) -> Row:
        assert self._type is not None
        out = [_number(v) for v in values]
        for i, how in self._open:
            out[i] = _opened(self._sealer, how, out[i])
        return self._type(out)

    def fetchone(self) -> Row | None:
        """The next row, or None."""
        values = self._cursor.fetchone() if self._type is not None else None
        return None if values is None else self._row(values)

    def fetchall(self) -> list[Row]:
        """Every remaining row."""
        if self._type is None:
            return []
        return [self._row(v) for v in self._cursor.fetchall()]

    def fetchmany(self, size: int) -> list[Row]:
        """Up to ``size`` more rows."""
        if self._type is None:
            return []
        return [self._row(v) for v in self._cursor.fetchmany(size)]

    def __iter__(self) -> Iterator[Row]:
        return iter(self.fetchall())

    def close(self) -> None:
        """Release the cursor."""
        self._cursor.close()


class PgConnection:
    """A psycopg connection (autocommit: transactions are the caller's ``BEGIN``)
    taking the store's SQLite statements. Used by one thread at a time."""

    def __init__(self, raw: psycopg.Connection[Any], sealer: Sealer) -> None:
        self.raw = raw
        self.sealer = sealer

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open."""
        return self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> PgCursor:
        """Run one statement. ``BEGIN IMMEDIATE`` (SQLite's "begin and take the write
        lock") begins and takes the cluster's writer lock (:data:`WRITER_LOCK`)."""
        if sql == "BEGIN IMMEDIATE":
            self.raw.execute("BEGIN")
            sql = f"SELECT pg_advisory_xact_lock({WRITER_LOCK})"
        statement = translate(sql)
        cursor = psycopg.RawCursor(self.raw)
        try:
            cursor.execute(statement.sql, self._parameters(statement, parameters) or None)
        except psycopg.Error as exc:
            exc.add_note(f"statement: {statement.sql}")  # the SQL, never the parameters
            raise
        return PgCursor(cursor, statement, self.sealer)

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]]) -> PgCursor:
        """Run one statement for each parameter set."""
        statement = translate(sql)
        cursor = psycopg.RawCursor(self.raw)
        cursor.executemany(statement.sql, [self._parameters(statement, p) for p in parameters])
        return PgCursor(cursor, statement, self.sealer)

    def _parameters(self, statement: Statement, given: Sequence[Any]) -> list[Any]:
        if isinstance(given, dict):
            raise TypeError("the store passes parameters by position")
        if len(given) != statement.given:
            raise psycopg.ProgrammingError(
                f"Incorrect number of bindings supplied. The current statement uses"
                f" {statement.given}, and there are {len(given)} supplied."
            )
        values = list(given)
        for i in statement.lists:
            value = values[i]
            values[i] = json.loads(value) if isinstance(value, str | bytes) else list(value)
        for i in statement.limits:
            if isinstance(values[i], int) and values[i] < 0:
                values[i] = None
        seal = self.sealer
        for how, user, value in statement.computed:
            owner = None if values[user] is None else str(values[user])
            if how is Computed.SEAL:
                values.append(seal.seal(owner, values[value]))
            elif how is Computed.SEAL_BYTES:
                values.append(seal.seal_bytes(owner, values[value]))
            else:
                values.append(seal.tag(owner, values[value]))
        return [values[i] for i in statement.sent]

    def commit(self) -> None:
        """COMMIT the open transaction (nothing happens when there is none)."""
        if self.in_transaction:
            self.raw.execute("COMMIT")

    def rollback(self) -> None:
        """ROLLBACK the open transaction (nothing happens when there is none)."""
        if self.in_transaction:
            self.raw.execute("ROLLBACK")

    def close(self) -> None:
        """Close the connection."""
        self.raw.close()
