"""Migration of the events table: what happened, when, to whom, without content.

Kept apart from :mod:`picobot.store.migrations`, which lists it in order; see there for
the rules (never edit a released migration).
"""

from __future__ import annotations

from picobot.store.connection import AsyncConnection
from picobot.store.migration_script import run_script


async def m014_events(conn: AsyncConnection) -> None:
    """The ``events`` table: one row per thing that happened, in order (``id``).

    ``payload_json`` holds ids and counts, never message content; ``actor`` names who
    did it when that was not the user (an operator, the supervisor). Rows are written
    in the transaction of what they record, pruned by retention with the data they
    describe and deleted by purges with the user's or session's data (see
    picobot.store.events).
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
