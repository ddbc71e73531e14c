"""The migration of the per-user privacy preferences; see picobot.store.conversation.preferences."""

from __future__ import annotations

from picobot.store.connection import AsyncConnection
from picobot.store.migrations.script import run_script


async def m019_user_preferences(conn: AsyncConnection) -> None:
    """What each user lets the bot do with their data: learn (facts, reply markers,
    reflections) and recall (past records, learned facts and digests in the prompt);
    and notes marked sensitive.

    ``user_preferences``: one row per user who changed a default; no row means both
    are on. Holds no content, only the user id and two switches; deleted with the
    user's data. ``user_memories.sensitive``: a note kept out of the recall index (the
    memory triggers index only notes that are not), of the prompt and of the model's
    ``memory`` tool; still listed, exported and purged for its user.
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

        ALTER TABLE user_memories ADD COLUMN sensitive INTEGER NOT NULL DEFAULT 0
            CHECK (sensitive IN (0, 1));
        DROP TRIGGER search_memories_ai;
        DROP TRIGGER search_memories_au;
        CREATE TRIGGER search_memories_ai AFTER INSERT ON user_memories
        WHEN NEW.sensitive = 0 BEGIN
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            VALUES (-NEW.id, 'u' || lower(hex(NEW.user_id)) || 'x',
                    picobot_index_text(NEW.user_id, NEW.key || ': ' || NEW.content),
                    NULL, NULL, NEW.updated_at);
        END;
        CREATE TRIGGER search_memories_au AFTER UPDATE ON user_memories BEGIN
            DELETE FROM search_index WHERE rowid = -OLD.id;
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            SELECT -NEW.id, 'u' || lower(hex(NEW.user_id)) || 'x',
                   picobot_index_text(NEW.user_id, NEW.key || ': ' || NEW.content),
                   NULL, NULL, NEW.updated_at
            WHERE NEW.sensitive = 0;
        END;
        """,
    )
