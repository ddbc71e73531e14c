"""The migration of the message vectors (recall by meaning); see picobot.store.retrieval.vectors."""

from __future__ import annotations

from picobot.store.connection import AsyncConnection
from picobot.store.migrations.script import run_script


async def m018_message_vectors(conn: AsyncConnection) -> None:
    """One embedding per message, beside it, going wherever the message goes.

    ``message_id`` is the message's id and cascades: a purge, retention or any other
    delete of the message deletes its vector in the same transaction. ``model`` names
    the embedding model (vectors of another are never compared); ``vector`` holds
    float16 values, little-endian. An edited message loses its vector, which the
    indexer computes again. Written only by the background indexer while an embedding
    model is configured; empty otherwise.
    """
    await run_script(
        conn,
        """
        CREATE TABLE message_vectors (
            message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
            model TEXT NOT NULL,
            vector BLOB NOT NULL
        );
        CREATE TRIGGER message_vectors_edited AFTER UPDATE OF content ON messages
        WHEN NEW.content IS NOT OLD.content BEGIN
            DELETE FROM message_vectors WHERE message_id = OLD.id;
        END;
        """,
    )
