"""Opening one SQLite connection the PicoBot way, and explaining SQLite's errors."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from picobot.errors import StoreUnavailable
from picobot.store.connection import AsyncConnection
from picobot.store.keys.sealing import Sealer
from picobot.store.retrieval.terms import INDEX_TEXT_FUNCTION, fts_query, index_text


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


async def pragma(conn: AsyncConnection, pragma: str) -> list[sqlite3.Row]:
    """Run a PRAGMA and finalize its statement (an open one would hold a lock)."""
    async with conn.execute(f"PRAGMA {pragma}") as cur:
        return list(await cur.fetchall())


def open_sqlite(database: str, **kwargs: Any) -> sqlite3.Connection:
    """``sqlite3.connect``, in one place: the I/O seam the fault tests replace."""
    conn: sqlite3.Connection = sqlite3.connect(database, **kwargs)
    return conn


async def connect(
    path: Path, busy_timeout_ms: int, *, writer: bool = False, sealer: Sealer | None = None
) -> AsyncConnection:
    """One connection; ``writer``: the writer, which also puts the file in WAL mode.

    ``sealer`` backs the connection's sealing functions (:func:`install_functions`).
    """

    def opener() -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves so a transaction is exactly
        # what transaction() says, not what the sqlite3 module guesses.
        conn = open_sqlite(str(path), isolation_level=None, timeout=busy_timeout_ms / 1000)
        conn.row_factory = sqlite3.Row
        return conn

    conn = await AsyncConnection.open(opener, name="picobot-writer" if writer else "picobot-db")
    try:
        # Sealing, and the recall index's per-user terms, are SQL functions.
        await conn.run(lambda raw: install_functions(raw, sealer or Sealer()))
        await pragma(conn, f"busy_timeout={int(busy_timeout_ms)}")
        await pragma(conn, "foreign_keys=ON")
        # Purged text must not survive in free space: zero every deleted cell and freed
        # page instead of only unlinking it (see picobot.store.erasure.erase.erase_residue).
        await pragma(conn, "secure_delete=ON")
        # NORMAL is durable against process crashes in WAL mode; only an OS crash or
        # power loss can undo the last commits.
        await pragma(conn, "synchronous=NORMAL")
        if writer:
            await _make_writer(conn, path)
    except BaseException:
        await conn.close()
        raise
    return conn


def install_functions(conn: sqlite3.Connection, sealer: Sealer | None = None) -> None:
    """Install PicoBot's SQL functions on ``conn`` (every store connection; tools, benches).

    ``picobot_seal(user_id, text)`` and ``picobot_open(value)`` seal and open stored
    text (:mod:`picobot.store.keys.sealing`), ``picobot_seal_bytes`` and
    ``picobot_open_bytes`` a vector; ``picobot_tag(user_id, name)`` is the lookup tag
    of a name (a note's key, a fact's subject: :meth:`Sealer.tag`), stored in the
    column it is found by, while the name itself is sealed beside it;
    ``picobot_index_text(user_id, text)``
    makes the recall index's terms of a (sealed) text and ``picobot_match(user_id,
    terms_json)`` the MATCH expression of a query, both under the user's term key.
    """
    seal = sealer or Sealer()

    def index(user_id: str | None, value: object) -> str | None:
        return index_text(user_id, seal.open(value), seal.terms_key(user_id))

    def match(user_id: str, terms: str) -> str:
        return fts_query(user_id, json.loads(terms), seal.terms_key(user_id))

    conn.create_function(INDEX_TEXT_FUNCTION, 2, index, deterministic=True)
    conn.create_function("picobot_seal", 2, seal.seal)
    conn.create_function("picobot_open", 1, seal.open)
    conn.create_function("picobot_seal_bytes", 2, seal.seal_bytes)
    conn.create_function("picobot_open_bytes", 1, seal.open_bytes)
    conn.create_function("picobot_tag", 2, seal.tag)
    conn.create_function("picobot_match", 2, match)


async def _make_writer(conn: AsyncConnection, path: Path) -> None:
    """WAL mode without automatic checkpoints, on a file that is PicoBot's.

    A file that already holds tables but no ``_migrations`` belongs to another
    application (every PicoBot database records its migrations before creating any
    other table); it is refused before anything, WAL mode included, is written to it.
    """
    async with conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        " ORDER BY name"
    ) as cur:
        tables = [str(row[0]) for row in await cur.fetchall()]
    if tables and "_migrations" not in tables:
        raise StoreUnavailable(
            f"database {path} is not a PicoBot database: it holds tables of another"
            f" application ({', '.join(tables[:5])}{', ...' if len(tables) > 5 else ''})"
            " and no PicoBot schema; check [data] dir"
        )
    await pragma(conn, "journal_mode=WAL")
    # Checkpoints run in the background (checkpoint_passive), not inside a commit:
    # an automatic one runs inside the commit that crosses its threshold (a copy of the
    # WAL into the file and an fsync), a stall of a chat's write.
    await pragma(conn, "wal_autocheckpoint=0")
