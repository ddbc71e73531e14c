"""What purges remove of reflections and digests: derived data follows its sources.

A session purge deletes the session's reflections (their provenance lies only in it)
and marks every digest that folded one of them, and the digests above it, stale: their
text is emptied in the same transaction, the one that deletes the session row (see
:meth:`picobot.store.erasure.purge.PurgeStore.delete_session`), so nothing derived from the
purged session survives in the file or the recall index, and rebuilt later from what
remains (see :class:`picobot.tasks.reflection.ReflectionTask`; a rebuild or fold that
read a purged row stores nothing, :class:`picobot.store.learned.digests.DigestStore` checks its
sources in its write). A user purge deletes all of the
user's reflections and digests. Retention leaves them alone: they are derived data
meant to outlast the 90 days of conversation they came from.
"""

from __future__ import annotations

import sqlite3

from picobot.store.connection import AsyncConnection
from picobot.store.db import Database
from picobot.store.erasure.purge_counts import index_entries
from picobot.store.migrations.layers import DIGEST_ROWID_BASE, REFLECTION_ROWID_BASE

_OF_SESSION = "SELECT id FROM digests WHERE level = 0 AND session_id = ?1"
_OF_USER = "SELECT id FROM digests WHERE user_id = ?1"
_ROWIDS = (
    f"SELECT -(CASE WHEN level = 0 THEN {REFLECTION_ROWID_BASE} ELSE {DIGEST_ROWID_BASE}"  # noqa: S608
    " END + id) FROM digests WHERE id IN ({doomed})"
)
_ENTRIES = f"SELECT {index_entries(_ROWIDS)}"
# Every digest above the session's reflections, however many levels up.
_ABOVE = (
    "WITH RECURSIVE up(id) AS (SELECT parent_id FROM digests WHERE level = 0"
    " AND session_id = ?1 AND parent_id IS NOT NULL UNION SELECT d.parent_id FROM digests d"
    " JOIN up ON d.id = up.id WHERE d.parent_id IS NOT NULL) SELECT id FROM up"
)


def _count(conn: sqlite3.Connection, doomed: str, key: str) -> tuple[int, int]:
    row = conn.execute(
        f"SELECT (SELECT COUNT(*) FROM ({doomed}) AS doomed), ({_ENTRIES.format(doomed=doomed)})",  # noqa: S608
        (key,),
    ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


async def _delete(conn: AsyncConnection, doomed: str, key: str) -> tuple[int, int]:
    async with conn.execute(_ENTRIES.format(doomed=doomed), (key,)) as cur:
        row = await cur.fetchone()
    entries = int(row[0]) if row else 0
    # Rows below a deleted digest lose their parent (ON DELETE SET NULL) first, explicitly.
    await conn.execute(
        f"UPDATE digests SET parent_id = NULL WHERE parent_id IN ({doomed})",  # noqa: S608
        (key,),
    )
    async with conn.execute(f"DELETE FROM digests WHERE id IN ({doomed})", (key,)) as cur:  # noqa: S608
        return int(cur.rowcount), entries


async def delete_session_layers(conn: AsyncConnection, session_id: str) -> tuple[int, int]:
    """In ``conn``'s transaction: delete ``session_id``'s reflections, and empty and mark
    stale every digest above them; (reflections, index entries) deleted."""
    # The digests above lose their text (and index entries) before the rows below go;
    # the purge counts only what it deleted.
    await conn.execute(
        f"UPDATE digests SET text = '', token_estimate = 0, stale = 1"  # noqa: S608
        f" WHERE id IN ({_ABOVE})",
        (session_id,),
    )
    async with conn.execute(
        "SELECT COUNT(*) FROM digests WHERE level = 0 AND session_id = ?", (session_id,)
    ) as cur:
        row = await cur.fetchone()
    if row is None or not int(row[0]):
        return 0, 0
    return await _delete(conn, _OF_SESSION, session_id)


class DigestPurge:
    """Count and delete the reflections and digests a session or user purge takes."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def count_session(self, session_id: str) -> tuple[int, int]:
        """(reflections, index entries) :func:`delete_session_layers` would delete now."""
        return await self._db.read(lambda c: _count(c, _OF_SESSION, session_id))

    async def count_user(self, user_id: str) -> tuple[int, int]:
        """(reflections and digests, index entries) :meth:`delete_user` would delete."""
        return await self._db.read(lambda c: _count(c, _OF_USER, user_id))

    async def delete_user(self, user_id: str) -> tuple[int, int]:
        """Delete every reflection and digest of ``user_id`` with its index entries, and
        the user's events of pins, reflections and digests (ids only, but the user's)."""
        async with self._db.transaction() as conn:
            await conn.execute(
                "DELETE FROM events WHERE user_id = ? AND type IN"
                " ('pin.added', 'pin.removed', 'reflection.stored', 'digest.updated')",
                (user_id,),
            )
            return await _delete(conn, _OF_USER, user_id)
