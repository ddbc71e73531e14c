"""Migration of the events table: what happened, when, to whom, without content.

Kept apart from :mod:`picobot.store.migrations`, which lists it in order; see there for
the rules (never edit a released migration).
"""

from __future__ import annotations

from picobot.store.connection import AsyncConnection
from picobot.store.migrations.script import run_script


async def m014_events(conn: AsyncConnection) -> None:
    """The ``events`` table: one row per thing that happened, in order (``id``).

    ``payload_json`` holds ids and counts, never message content; ``actor`` names who
    did it when that was not the user (an operator, the supervisor). Rows are written
    in the transaction of what they record, pruned by retention with the data they
    describe and deleted by purges with the user's or session's data (see
    picobot.store.conversation.events).
    """
    await run_script(
        conn,
        """
        CREATE TABLE events (
            id INTEGER PRIMARY KEY,
            at REAL NOT NULL,
            user_id TEXT,
            session_id TEXT,
            type TEXT NOT NULL,
            actor TEXT,
            payload_json TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX events_by_user ON events(user_id, id);
        CREATE INDEX events_by_session ON events(session_id, id);
        CREATE INDEX events_by_type ON events(type, id);
        CREATE INDEX events_by_age ON events(at);
        """,
    )


async def m017_events_autoincrement(conn: AsyncConnection) -> None:
    """Rebuild ``events`` with ``id INTEGER PRIMARY KEY AUTOINCREMENT``; rows keep their ids.

    Without AUTOINCREMENT SQLite hands out MAX(id)+1, so after a purge deleted the newest
    events their ids came back and every cursor past them (a live stream, ``after``,
    ``Last-Event-ID``) skipped the new events. SQLite's table rebuild (create, copy, drop,
    rename, re-index) in the migration's transaction; ``sqlite_sequence`` starts at the
    highest id kept (ids above it deleted before this migration cannot be known) and
    holds only the table name and that number.
    """
    await run_script(
        conn,
        """
        CREATE TABLE events_rebuilt (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            at REAL NOT NULL,
            user_id TEXT,
            session_id TEXT,
            type TEXT NOT NULL,
            actor TEXT,
            payload_json TEXT NOT NULL DEFAULT '{}'
        );
        INSERT INTO events_rebuilt (id, at, user_id, session_id, type, actor, payload_json)
            SELECT id, at, user_id, session_id, type, actor, payload_json FROM events;
        DROP TABLE events;
        ALTER TABLE events_rebuilt RENAME TO events;
        DELETE FROM sqlite_sequence WHERE name IN ('events', 'events_rebuilt');
        INSERT INTO sqlite_sequence (name, seq) SELECT 'events', COALESCE(MAX(id), 0) FROM events;
        CREATE INDEX events_by_user ON events(user_id, id);
        CREATE INDEX events_by_session ON events(session_id, id);
        CREATE INDEX events_by_type ON events(type, id);
        CREATE INDEX events_by_age ON events(at);
        """,
    )
