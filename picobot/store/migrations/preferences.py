"""The migration of the per-user privacy preferences; see picobot.store.conversation.preferences."""

from __future__ import annotations

from picobot.store.connection import AsyncConnection
from picobot.store.migrations.script import run_script


async def m019_user_preferences(conn: AsyncConnection) -> None:
    """What each user lets the bot do with their data: learn (facts, reply markers,
    reflections) and recall (past records, learned facts and digests in the prompt).

    One row per user who changed a default; no row means both are on. Holds no
    content, only the user id and two switches; deleted with the user's data.
    """
    await run_script(
        conn,
        """
        CREATE TABLE user_preferences (
            user_id TEXT PRIMARY KEY,
            learning INTEGER NOT NULL DEFAULT 1 CHECK (learning IN (0, 1)),
            recall INTEGER NOT NULL DEFAULT 1 CHECK (recall IN (0, 1)),
            updated_at REAL NOT NULL
        );
        """,
    )
