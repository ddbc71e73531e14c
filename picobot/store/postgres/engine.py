"""Opening a :class:`~picobot.store.db.Database` on PostgreSQL.

The same :class:`~picobot.store.db.Database` runs the store's operations: a writer
connection whose write transactions also take the cluster-wide writer lock
(:data:`~picobot.store.postgres.driver.WRITER_LOCK`), readers whose transactions are
read-only snapshots, each connection in a thread of its own as on SQLite. Stored text
is always sealed here (a key store is required): the sealed columns are ``bytea``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from picobot.errors import StoreUnavailable
from picobot.store.connection import AsyncConnection
from picobot.store.engine import Engine
from picobot.store.keys.sealing import Sealer
from picobot.store.postgres.connect import connect, explain, redacted

if TYPE_CHECKING:
    from picobot.store.db import Database


def postgres_engine(url: str) -> Engine:
    """PostgreSQL at ``url``."""
    return Engine(
        "postgresql",
        redacted(url),
        (psycopg.Error,),
        (psycopg.OperationalError,),
        (psycopg.InterfaceError,),
        lambda exc: explain(exc, url),
    )


async def open_postgres(
    cls: type[Database], url: str, path: Path, *, readers: int, sealer: Sealer, migrate: bool
) -> Database:
    """A database on PostgreSQL at ``url``; ``path``'s directory holds the data
    directory's files (exports waiting to be fetched). Raises StoreUnavailable."""
    engine = postgres_engine(url)
    if sealer.ring is None:
        raise StoreUnavailable(
            f"database {engine.where}: PostgreSQL stores keep every text sealed and need"
            " the key store (docs/privacy.md#per-user-keys)"
        )
    conns: list[AsyncConnection] = []
    try:
        conns.append(await connect(url, sealer, name="picobot-writer"))
        for _ in range(max(1, readers)):
            conns.append(await connect(url, sealer, reader=True))
        conns.append(await connect(url, sealer, name="picobot-maintenance"))
    except psycopg.Error as exc:
        for conn in conns:
            await conn.close()
        raise StoreUnavailable(explain(exc, url)) from None
    db = cls(path, conns[0], conns[1:-1], conns[-1], sealer, engine)
    await db.prepare(migrate=migrate)
    return db


async def database_size(db: Database) -> int:
    """The bytes the database takes on the server: its tables, indexes and TOAST."""
    row = await db.fetchone("SELECT pg_database_size(current_database())")
    return int(row[0]) if row is not None else 0
