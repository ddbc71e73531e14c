"""Numbered schema migrations, applied in order and recorded in the database.

Each migration is a named function; ``MIGRATIONS`` is the ordered list and a
migration's version is its position (1-based). Applied versions live in the
``_migrations`` table. Never edit a released migration: append a new one.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import aiosqlite

if TYPE_CHECKING:
    from picobot.store.db import Database

log = logging.getLogger(__name__)

Migration = Callable[[aiosqlite.Connection], Awaitable[None]]


async def m001_core_tables(conn: aiosqlite.Connection) -> None:
    """Sessions, messages, user memories, session summaries, tool records."""
    await run_script(
        conn,
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            parent_session_id TEXT REFERENCES sessions(id) ON DELETE SET NULL,
            channel TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            created_at REAL NOT NULL,
            last_active REAL NOT NULL,
            state_json TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX sessions_by_user ON sessions(user_id, last_active DESC);

        -- The session each (channel, chat, user) is currently talking in.
        CREATE TABLE current_sessions (
            channel TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            PRIMARY KEY (channel, chat_id, user_id)
        );

        CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            seq_order INTEGER NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
            content TEXT NOT NULL,
            token_estimate INTEGER NOT NULL,
            created_at REAL NOT NULL,
            UNIQUE (session_id, seq_order)
        );
        CREATE INDEX messages_by_age ON messages(created_at);

        CREATE TABLE user_memories (
            id INTEGER PRIMARY KEY,
            user_id TEXT NOT NULL,
            key TEXT NOT NULL,
            content TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            UNIQUE (user_id, key)
        );

        CREATE TABLE session_summaries (
            session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
            summary TEXT NOT NULL,
            covered_seq INTEGER NOT NULL,
            token_estimate INTEGER NOT NULL,
            updated_at REAL NOT NULL
        );

        CREATE TABLE tool_records (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            user_id TEXT NOT NULL,
            name TEXT NOT NULL,
            arguments TEXT NOT NULL,
            result TEXT NOT NULL,
            ok INTEGER NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE INDEX tool_records_by_session ON tool_records(session_id);
        CREATE INDEX tool_records_by_age ON tool_records(created_at);
        """,
    )


MIGRATIONS: list[Migration] = [m001_core_tables]


async def run_script(conn: aiosqlite.Connection, script: str) -> None:
    """Execute a multi-statement script inside the caller's transaction.

    ``executescript`` would COMMIT the open transaction first, so statements are split
    with ``sqlite3.complete_statement`` (which understands trigger bodies) and run
    one by one.
    """
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                await conn.execute(buffer)
            buffer = ""
    if buffer.strip().strip(";").strip() and not buffer.strip().startswith("--"):
        raise ValueError(f"incomplete SQL statement in migration: {buffer[:80]!r}")


async def _ensure_table(db: Database) -> None:
    async with db.transaction() as conn:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS _migrations ("
            "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
        )


async def applied_versions(db: Database) -> list[tuple[int, str]]:
    """The (version, name) of every applied migration, in order."""
    await _ensure_table(db)
    rows = await db.fetchall("SELECT version, name FROM _migrations ORDER BY version")
    return [(int(r["version"]), str(r["name"])) for r in rows]


async def apply_migrations(db: Database, migrations: list[Migration] | None = None) -> list[str]:
    """Apply every pending migration, each in its own transaction; return their names."""
    todo = MIGRATIONS if migrations is None else migrations
    done = {version for version, _ in await applied_versions(db)}
    if done and max(done) > len(todo):
        from picobot.errors import StoreUnavailable

        raise StoreUnavailable(
            f"database {db.path} has schema version {max(done)}, newer than this "
            f"PicoBot knows ({len(todo)}); upgrade PicoBot"
        )
    applied = []
    for version, migration in enumerate(todo, start=1):
        if version in done:
            continue
        name = migration.__name__
        async with db.transaction() as conn:
            await migration(conn)
            await conn.execute(
                "INSERT INTO _migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (version, name, time.time()),
            )
        log.info("applied migration %d %s", version, name)
        applied.append(name)
    return applied
