"""Counting and deleting chosen messages of one session, with what was derived from them.

What ``/undo``, ``/rewind``, deleting one message (see
:mod:`picobot.privacy.message_scope`) and the message cap (:mod:`picobot.tasks.caps`)
remove: the messages (the m002 triggers drop their
search-index entries, the foreign key their vectors), the tool records of the turns
they opened, the webhook rows they came in with and the replies queued for them, the
session's summary if it covered any of them (the summary task writes it again from
what remains), the facts learned only from them (facts with other sources lose these
sources), and the session's reflections, whose digests above are emptied and marked
stale as a session purge does (the reflection task rebuilds them). Fact extraction's
cursor of the session goes back to the last message left when it was past it, since
the next messages take the numbers after that one (a removed tail's). Everything goes in
one transaction; call :func:`picobot.store.erasure.erase.erase_residue` afterwards to
make the text unrecoverable from the file and its WAL.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from picobot.store.db import Database
from picobot.store.erasure.purge_counts import PurgeCounts, index_entries
from picobot.store.learned.digest_purge import delete_session_layers
from picobot.store.learned.fact_purge import count_message_facts, delete_message_facts

# ?1: the session, ?2: the JSON array of message ids (only those of the session count).
_IDS = "SELECT id FROM messages WHERE session_id = ?1 AND id IN (SELECT value FROM json_each(?2))"
# The clauses are constants of this module; only their parameters come from callers.
# A tool record belongs to the turn of the latest user message at or before it.
_TOOLS = (
    "SELECT t.id FROM tool_records t WHERE t.session_id = ?1 AND (SELECT m.id FROM messages m"  # noqa: S608
    " WHERE m.session_id = ?1 AND m.role = 'user' AND m.created_at <= t.created_at ORDER BY"
    f" m.seq_order DESC LIMIT 1) IN ({_IDS})"
)
_SUMMARY = (
    "SELECT session_id FROM session_summaries WHERE session_id = ?1 AND covered_seq >="  # noqa: S608
    f" (SELECT MIN(seq_order) FROM messages WHERE id IN ({_IDS}))"
)
_INBOX = (
    "SELECT i.id FROM webhook_inbox i JOIN messages m ON m.source_id = i.platform || ':' ||"  # noqa: S608
    f" i.message_id WHERE m.id IN ({_IDS})"
)
_ENTRIES = (
    f"{index_entries(_IDS)} + (SELECT COUNT(*) FROM message_vectors WHERE"  # noqa: S608
    f" message_id IN ({_IDS}))"
)


def tail_after(conn: sqlite3.Connection, session_id: str, seq_order: int) -> list[int]:
    """The ids of ``session_id``'s messages after ``seq_order``, oldest first."""
    rows = conn.execute(
        "SELECT id FROM messages WHERE session_id = ? AND seq_order > ? ORDER BY seq_order",
        (session_id, seq_order),
    ).fetchall()
    return [int(r[0]) for r in rows]


def _count(conn: sqlite3.Connection, session_id: str, ids: str) -> PurgeCounts:
    key = (session_id, ids)
    row = conn.execute(
        f"SELECT (SELECT COUNT(*) FROM ({_IDS}) AS ids), {_ENTRIES}, (SELECT COUNT(*) FROM"  # noqa: S608
        f" ({_TOOLS}) AS tools), (SELECT COUNT(*) FROM ({_SUMMARY}) AS summary),"
        f" (SELECT COUNT(*) FROM ({_INBOX}) AS inbox)"
        " + (SELECT COUNT(*) FROM outbound_queue WHERE inbox_id IN"
        f" ({_INBOX})), (SELECT COUNT(*) FROM digests WHERE level = 0 AND session_id = ?1)",
        key,
    ).fetchone()
    messages, entries, tools, summaries, webhook_rows, layers = (int(v) for v in row)
    if not messages:
        return PurgeCounts()
    real = json.dumps(
        [int(r[0]) for r in conn.execute(_IDS, key).fetchall()]
    )  # facts only follow messages of this session
    facts, fact_entries = count_message_facts(conn, real)
    return PurgeCounts(
        messages=messages,
        summaries=summaries,
        index_entries=entries + fact_entries,
        tool_records=tools,
        webhook_rows=webhook_rows,
        facts=facts,
        digests=layers,
    )


class MessagePurge:
    """Count and delete chosen messages of one session (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def tail_after(self, session_id: str, seq_order: int) -> list[int]:
        """The ids of the session's messages after ``seq_order``."""
        return await self._db.read(lambda c: tail_after(c, session_id, seq_order))

    async def count(self, session_id: str, ids: Sequence[int]) -> PurgeCounts:
        """What :meth:`delete` would remove now."""
        keys = json.dumps(list(ids))
        return await self._db.read(lambda c: _count(c, session_id, keys))

    async def delete(self, session_id: str, ids: Sequence[int]) -> PurgeCounts:
        """Delete the messages ``ids`` of ``session_id`` (others are ignored) and what was
        derived from them, in one transaction."""
        keys = json.dumps(list(ids))
        async with self._db.transaction() as conn:
            counted = await conn.run(_count, session_id, keys)
            if not counted.messages:
                return PurgeCounts()
            key = (session_id, keys)
            async with conn.execute(_IDS, key) as cur:
                real = json.dumps([int(r[0]) for r in await cur.fetchall()])
            # The rows found through the messages go before them.
            await conn.execute(f"DELETE FROM outbound_queue WHERE inbox_id IN ({_INBOX})", key)  # noqa: S608
            await conn.execute(f"DELETE FROM webhook_inbox WHERE id IN ({_INBOX})", key)  # noqa: S608
            await conn.execute(f"DELETE FROM tool_records WHERE id IN ({_TOOLS})", key)  # noqa: S608
            await conn.execute(
                f"DELETE FROM session_summaries WHERE session_id IN ({_SUMMARY})",  # noqa: S608
                key,
            )
            await delete_message_facts(conn, real)
            # New messages take the numbers after the last one left, which a removed tail
            # had: fact extraction must read them, so its cursor goes back to that last
            # one. (Removing the oldest messages leaves it: what follows was read.)
            left = (
                "SELECT COALESCE(MAX(seq_order), 0) FROM messages WHERE session_id = ?1"
                " AND id NOT IN (SELECT value FROM json_each(?2))"
            )
            await conn.execute(
                f"UPDATE fact_progress SET covered_seq = ({left}) WHERE session_id = ?1"  # noqa: S608
                f" AND covered_seq > ({left})",
                (session_id, real),
            )
            await delete_session_layers(conn, session_id)
            await conn.execute(
                "DELETE FROM message_pins WHERE message_id IN (SELECT value FROM json_each(?))",
                (real,),
            )
            await conn.execute(
                "DELETE FROM messages WHERE id IN (SELECT value FROM json_each(?))", (real,)
            )
        return counted


def _locate(conn: sqlite3.Connection, message_id: int) -> tuple[str, int, str] | None:
    row = conn.execute(
        "SELECT session_id, seq_order, role FROM messages WHERE id = ?", (message_id,)
    ).fetchone()
    return (str(row[0]), int(row[1]), str(row[2])) if row else None


def _last_exchange(conn: sqlite3.Connection, session_id: str) -> list[int]:
    """The last user message of the session and everything after it."""
    row = conn.execute(
        "SELECT MAX(seq_order) FROM messages WHERE session_id = ? AND role = 'user'",
        (session_id,),
    ).fetchone()
    if row is None or row[0] is None:
        return []
    return tail_after(conn, session_id, int(row[0]) - 1)


async def locate(db: Database, message_id: int) -> tuple[str, int, str] | None:
    """(session id, sequence number, role) of a message, None if there is none."""
    return await db.read(lambda c: _locate(c, message_id))


async def last_exchange(db: Database, session_id: str) -> list[int]:
    """The ids of the session's last user message and all that follows it."""
    return await db.read(lambda c: _last_exchange(c, session_id))


async def last_user_message(db: Database, session_id: str) -> int | None:
    """The id of ``session_id``'s last user message, None if it has none."""
    row = await db.fetchone(
        "SELECT id FROM messages WHERE session_id = ? AND role = 'user'"
        " ORDER BY seq_order DESC LIMIT 1",
        (session_id,),
    )
    return int(row[0]) if row else None


async def id_at_seq(db: Database, session_id: str, seq_order: int) -> int | None:
    """The id of ``session_id``'s message number ``seq_order`` (as /search shows ``#N``)."""
    row = await db.fetchone(
        "SELECT id FROM messages WHERE session_id = ? AND seq_order = ?", (session_id, seq_order)
    )
    return int(row[0]) if row else None
