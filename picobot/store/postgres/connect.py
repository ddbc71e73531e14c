"""Opening PostgreSQL connections the PicoBot way, and explaining the server's errors."""

from __future__ import annotations

import psycopg

from picobot.config.store import redacted as redacted
from picobot.store.connection import AsyncConnection
from picobot.store.keys.sealing import Sealer
from picobot.store.postgres.driver import PgConnection

CONNECT_TIMEOUT_SECS = 10
"""How long opening a connection waits for the server."""


def explain(exc: BaseException, url: str) -> str:
    """Turn a PostgreSQL error into one line an operator can act on."""
    where = redacted(url)
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, psycopg.OperationalError):
        return f"cannot use PostgreSQL at {where}: {msg}; check that the server is up and reachable"
    return f"PostgreSQL at {where} error: {msg}"


async def connect(
    url: str, sealer: Sealer, *, reader: bool = False, name: str = "picobot-pg"
) -> AsyncConnection:
    """One connection in a thread of its own, taking the store's statements.

    A reader's transactions are read-only and see one snapshot from their first
    statement to their end (repeatable read), as SQLite's read transactions do.
    """

    def opener() -> PgConnection:
        raw = psycopg.connect(
            url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECS, application_name=name
        )
        if reader:
            raw.execute("SET default_transaction_read_only = on")
            raw.execute("SET default_transaction_isolation = 'repeatable read'")
        return PgConnection(raw, sealer)

    return await AsyncConnection.open(opener, name=name)  # type: ignore[arg-type]
