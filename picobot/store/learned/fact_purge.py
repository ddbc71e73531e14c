"""What purges remove of learned facts: derived data follows its sources.

A session purge removes the facts whose provenance lies only in that session (no
source in another session and none made by an operator), with their sources, history
and recall-index entries; facts that were also learned elsewhere stay, losing only the
purged session's source rows (their history keeps the change, without the session id).
A user purge removes all the user's facts; an operator's purge of chosen facts removes
exactly those ids. Retention (``older``) leaves facts alone:
they are derived data that outlive the messages they came from, and fade by decay.
"""

from __future__ import annotations

import sqlite3

from picobot.store.connection import AsyncConnection
from picobot.store.conversation.event_prune import delete_fact_events
from picobot.store.db import Database
from picobot.store.erasure.purge_counts import index_entries
from picobot.store.migrations.facts import FACT_ROWID_BASE

_ONLY_IN_SESSION = (
    "SELECT f.id FROM facts f WHERE EXISTS (SELECT 1 FROM fact_sources s"
    " WHERE s.fact_id = f.id AND s.session_id = ?1) AND NOT EXISTS (SELECT 1 FROM"
    " fact_sources s WHERE s.fact_id = f.id AND (s.session_id IS NULL OR s.session_id <> ?1))"
)
_OF_USER = "SELECT id FROM facts WHERE user_id = ?1"
_BY_IDS = "SELECT id FROM facts WHERE id IN (SELECT value FROM json_each(?1))"
_ENTRIES_OF_ROWIDS = f"SELECT {index_entries('SELECT value FROM json_each(?1)')}"  # noqa: S608


def _count(conn: sqlite3.Connection, doomed: str, key: str) -> tuple[int, int]:
    rowids = f"SELECT -({FACT_ROWID_BASE} + id) FROM ({doomed}) AS doomed"  # noqa: S608
    row = conn.execute(
        f"SELECT (SELECT COUNT(*) FROM ({doomed}) AS doomed), {index_entries(rowids)}",  # noqa: S608
        (key,),
    ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


async def _delete(conn: AsyncConnection, doomed: str, key: str) -> tuple[int, int]:
    async with conn.execute(doomed, (key,)) as cur:
        doomed_ids = [int(r[0]) for r in await cur.fetchall()]
    ids = _json(doomed_ids)
    rowids = _json([-(FACT_ROWID_BASE + i) for i in doomed_ids])
    async with conn.execute(_ENTRIES_OF_ROWIDS, (rowids,)) as cur:
        row = await cur.fetchone()
    entries = int(row[0]) if row else 0
    await conn.run(delete_fact_events, ids)  # what happened to them goes with them
    for table, column in (
        ("fact_sources", "fact_id"),
        ("fact_history", "fact_id"),
        ("facts", "id"),
    ):
        # Dependent rows first and explicitly, so nothing goes uncounted by cascade.
        sql = f"DELETE FROM {table} WHERE {column} IN (SELECT value FROM json_each(?))"  # noqa: S608
        async with conn.execute(sql, (ids,)) as cur:
            deleted = int(cur.rowcount)
    return deleted, entries


async def delete_session_facts(conn: AsyncConnection, session_id: str) -> tuple[int, int]:
    """In ``conn``'s transaction: delete the facts learned only in ``session_id`` and
    unlink the session from the others; (facts, index entries) deleted."""
    done = await _delete(conn, _ONLY_IN_SESSION, session_id)
    await conn.execute("DELETE FROM fact_sources WHERE session_id = ?", (session_id,))
    await conn.execute(
        "UPDATE fact_history SET session_id = NULL WHERE session_id = ?", (session_id,)
    )
    return done


def _json(ids: list[int]) -> str:
    return "[" + ",".join(str(i) for i in ids) + "]"


class FactPurge:
    """Count and delete the learned facts a session or user purge takes."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def count_session(self, session_id: str) -> tuple[int, int]:
        """(facts, index entries) :func:`delete_session_facts` would remove now."""
        return await self._db.read(lambda c: _count(c, _ONLY_IN_SESSION, session_id))

    async def count_user(self, user_id: str) -> tuple[int, int]:
        """(facts, index entries) :meth:`delete_user` would remove now."""
        return await self._db.read(lambda c: _count(c, _OF_USER, user_id))

    async def delete_user(self, user_id: str) -> tuple[int, int]:
        """Delete every fact of ``user_id`` with its sources, history and index entries."""
        async with self._db.transaction() as conn:
            return await _delete(conn, _OF_USER, user_id)

    async def count_ids(self, ids: tuple[int, ...]) -> tuple[int, int]:
        """(facts, index entries) :meth:`delete_ids` would remove now."""
        return await self._db.read(lambda c: _count(c, _BY_IDS, _json(list(ids))))

    async def delete_ids(self, ids: tuple[int, ...]) -> tuple[int, int]:
        """Delete the facts ``ids`` (those that still exist) with everything attached."""
        async with self._db.transaction() as conn:
            return await _delete(conn, _BY_IDS, _json(list(ids)))


# A fact every source of which is one of the messages ?1 (a JSON array of ids).
_ONLY_FROM_MESSAGES = (
    "SELECT f.id FROM facts f WHERE EXISTS (SELECT 1 FROM fact_sources s WHERE s.fact_id ="
    " f.id AND s.message_id IN (SELECT value FROM json_each(?1))) AND NOT EXISTS (SELECT 1"
    " FROM fact_sources s WHERE s.fact_id = f.id AND (s.message_id IS NULL OR s.message_id"
    " NOT IN (SELECT value FROM json_each(?1))))"
)


def count_message_facts(conn: sqlite3.Connection, ids: str) -> tuple[int, int]:
    """(facts, index entries) :func:`delete_message_facts` would remove now."""
    return _count(conn, _ONLY_FROM_MESSAGES, ids)


async def delete_message_facts(conn: AsyncConnection, ids: str) -> tuple[int, int]:
    """In ``conn``'s transaction: delete the facts learned only from the messages ``ids``
    (a JSON array) and drop those messages from the sources of the others; (facts,
    index entries) deleted."""
    done = await _delete(conn, _ONLY_FROM_MESSAGES, ids)
    await conn.execute(
        "DELETE FROM fact_sources WHERE message_id IN (SELECT value FROM json_each(?))", (ids,)
    )
    return done
