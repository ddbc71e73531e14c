"""Which database server holds the store: what the store's generic code needs to know.

:class:`picobot.store.db.Database` runs the same operations on SQLite (the embedded
default) and PostgreSQL; an :class:`Engine` carries the few things that differ outside
the SQL itself: what messages call the database, which of the driver's errors mean
"cannot be used now", and whether the database has a write-ahead log of PicoBot's own
to checkpoint.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from picobot.store.connect import explain


@dataclass(frozen=True)
class Engine:
    """One database server's traits (see the module docstring)."""

    name: Literal["sqlite", "postgresql"]
    where: str
    """The database as messages name it: a file path, or a URL without its password."""
    errors: tuple[type[Exception], ...]
    """Every error of the driver."""
    unavailable: tuple[type[Exception], ...]
    """Errors that mean the database cannot be used now (locked, unreachable, full)."""
    misuse: tuple[type[Exception], ...]
    """Errors of a call on a closed connection."""
    explain: Callable[[BaseException], str]
    """One line an operator can act on, for one of ``errors``."""

    @property
    def file(self) -> bool:
        """Whether the database is a file of PicoBot's (WAL checkpoints, VACUUM into it)."""
        return self.name == "sqlite"


def sqlite_engine(path: Path) -> Engine:
    """The embedded default: one SQLite file."""
    return Engine(
        "sqlite",
        str(path),
        (sqlite3.Error,),
        (sqlite3.OperationalError,),
        (sqlite3.ProgrammingError,),
        lambda exc: explain(exc, path) if isinstance(exc, sqlite3.Error) else str(exc),
    )


def is_postgres(conn: object) -> bool:
    """Whether a store function's connection is PostgreSQL's (a
    :class:`~picobot.store.postgres.driver.PgConnection`) rather than ``sqlite3``'s.

    Why: the few operations SQL alone cannot share (the recall index: FTS5 there, tables
    and BM25 in Python here) branch on it, once per function.
    """
    return not isinstance(conn, sqlite3.Connection)
