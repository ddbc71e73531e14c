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


async def m002_search_index(conn: aiosqlite.Connection) -> None:
    """Full-text recall index over user/assistant messages and user memories.

    A regular FTS5 table (it keeps its own copy of the text) kept in sync by triggers
    in the writing transaction. rowid = messages.id for a message, -user_memories.id
    for a memory, so a delete is one rowid lookup and a hit maps back without a join.
    ``owner`` holds the user token every query filters on, computed with core SQL as
    'u' || lower(hex(user_id)) || 'x' so the triggers work on any connection (a
    registered sha256 function would make writes from other connections fail). No
    Porter suffix ends in 'x', so the stemmer never alters a token, and hex is
    injective, so two users never share one. See picobot.store.search.
    """
    await run_script(
        conn,
        """
        CREATE VIRTUAL TABLE search_index USING fts5(
            owner,
            body,
            session_id UNINDEXED,
            seq_order UNINDEXED,
            created_at UNINDEXED,
            tokenize = 'porter unicode61 remove_diacritics 2'
        );
        -- The owner column only narrows; weight 0 keeps it out of the score.
        INSERT INTO search_index (search_index, rank) VALUES ('rank', 'bm25(0.0, 1.0)');

        -- Tool and system messages are not indexed: tool output includes earlier
        -- recall results and would echo them back.
        CREATE TRIGGER search_messages_ai AFTER INSERT ON messages
        WHEN NEW.role IN ('user', 'assistant') BEGIN
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            SELECT NEW.id, 'u' || lower(hex(user_id)) || 'x', NEW.content, NEW.session_id,
                   NEW.seq_order, NEW.created_at
            FROM sessions WHERE id = NEW.session_id;
        END;
        CREATE TRIGGER search_messages_ad AFTER DELETE ON messages BEGIN
            DELETE FROM search_index WHERE rowid = OLD.id;
        END;
        CREATE TRIGGER search_messages_au AFTER UPDATE ON messages BEGIN
            DELETE FROM search_index WHERE rowid = OLD.id;
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            SELECT NEW.id, 'u' || lower(hex(user_id)) || 'x', NEW.content, NEW.session_id,
                   NEW.seq_order, NEW.created_at
            FROM sessions WHERE id = NEW.session_id AND NEW.role IN ('user', 'assistant');
        END;

        CREATE TRIGGER search_memories_ai AFTER INSERT ON user_memories BEGIN
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            VALUES (-NEW.id, 'u' || lower(hex(NEW.user_id)) || 'x',
                    NEW.key || ': ' || NEW.content, NULL, NULL, NEW.updated_at);
        END;
        CREATE TRIGGER search_memories_ad AFTER DELETE ON user_memories BEGIN
            DELETE FROM search_index WHERE rowid = -OLD.id;
        END;
        CREATE TRIGGER search_memories_au AFTER UPDATE ON user_memories BEGIN
            DELETE FROM search_index WHERE rowid = -OLD.id;
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            VALUES (-NEW.id, 'u' || lower(hex(NEW.user_id)) || 'x',
                    NEW.key || ': ' || NEW.content, NULL, NULL, NEW.updated_at);
        END;

        -- A session handed to another user takes its messages' index entries along.
        CREATE TRIGGER search_sessions_au AFTER UPDATE OF user_id ON sessions
        WHEN NEW.user_id IS NOT OLD.user_id BEGIN
            UPDATE search_index SET owner = 'u' || lower(hex(NEW.user_id)) || 'x'
            WHERE rowid IN (SELECT id FROM messages WHERE session_id = NEW.id);
        END;

        -- Backfill what existed before this migration.
        INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
        SELECT m.id, 'u' || lower(hex(s.user_id)) || 'x', m.content, m.session_id,
               m.seq_order, m.created_at
        FROM messages m JOIN sessions s ON s.id = m.session_id
        WHERE m.role IN ('user', 'assistant');
        INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
        SELECT -id, 'u' || lower(hex(user_id)) || 'x', key || ': ' || content, NULL, NULL,
               updated_at
        FROM user_memories;
        """,
    )


async def m003_task_runs(conn: aiosqlite.Connection) -> None:
    """The last run of each background job, kept durably by job name.

    The supervisor's JobStatus lives in memory; this row survives a restart, so a job
    that failed (or died mid-run: ``last_started_at`` after ``last_finished_at``) stays
    visible to ``picobot status``. ``result`` and ``error`` hold counts and error
    types, never user content. See picobot.tasks.retention.
    """
    await run_script(
        conn,
        """
        CREATE TABLE task_runs (
            name TEXT PRIMARY KEY,
            last_started_at REAL,
            last_finished_at REAL,
            ok INTEGER,
            result TEXT,
            error TEXT
        );
        """,
    )


async def m004_webhook_queues(conn: aiosqlite.Connection) -> None:
    """The durable webhook inbox and the outbound reply queue.

    ``webhook_inbox`` records every accepted platform message before the webhook is
    acknowledged; ``UNIQUE(platform, message_id)`` turns a platform's redelivery into a
    no-op, across restarts. ``outbound_queue`` holds replies until the platform API
    took them, with attempts and the time of the next try; ``seq`` orders the replies
    of one inbox message. Both carry ``user_id`` so a user purge can delete them; their
    text is blanked once it is no longer needed (processed, sent). See
    picobot.store.webhooks.
    """
    await run_script(
        conn,
        """
        CREATE TABLE webhook_inbox (
            id INTEGER PRIMARY KEY,
            platform TEXT NOT NULL,
            message_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            text TEXT NOT NULL,
            reply_to_json TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'done', 'failed')),
            attempts INTEGER NOT NULL DEFAULT 0,
            received_at REAL NOT NULL,
            processed_at REAL,
            UNIQUE (platform, message_id)
        );
        CREATE INDEX webhook_inbox_pending ON webhook_inbox(id) WHERE status = 'pending';
        CREATE INDEX webhook_inbox_by_user ON webhook_inbox(user_id);
        CREATE INDEX webhook_inbox_by_age ON webhook_inbox(received_at);

        CREATE TABLE outbound_queue (
            id INTEGER PRIMARY KEY,
            platform TEXT NOT NULL,
            user_id TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            reply_to_json TEXT NOT NULL,
            text TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'sent', 'failed')),
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL NOT NULL,
            last_error TEXT,
            created_at REAL NOT NULL,
            sent_at REAL,
            inbox_id INTEGER REFERENCES webhook_inbox(id) ON DELETE SET NULL,
            seq INTEGER NOT NULL DEFAULT 0
        );
        -- Due items, and the head of each chat's pending replies (sent in id order).
        CREATE INDEX outbound_due ON outbound_queue(next_attempt_at) WHERE status = 'pending';
        CREATE INDEX outbound_by_chat ON outbound_queue(platform, chat_id, id)
            WHERE status = 'pending';
        CREATE INDEX outbound_by_user ON outbound_queue(user_id);
        CREATE INDEX outbound_by_inbox ON outbound_queue(inbox_id);
        CREATE INDEX outbound_by_age ON outbound_queue(created_at);
        """,
    )


MIGRATIONS: list[Migration] = [
    m001_core_tables,
    m002_search_index,
    m003_task_runs,
    m004_webhook_queues,
]


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
