"""The migration that binds a database to its key store; see picobot.store.keys.binding."""

from __future__ import annotations

from picobot.store.connection import AsyncConnection
from picobot.store.migrations.script import run_script


async def m020_store_meta(conn: AsyncConnection) -> None:
    """``store_meta``: facts about the database itself, one value per name.

    ``key_store`` is the id of the key store whose keys seal this database's texts
    (a database is never written under another store's keys); ``index_terms`` is how
    the recall index's terms were made (words prefixed per user, or keyed by each user's
    key), so a change of scheme rebuilds the index. Holds no user content.
    """
    await run_script(
        conn,
        """
        CREATE TABLE store_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
        """,
    )
