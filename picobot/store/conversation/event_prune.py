"""Deleting events with the data they describe, and the one record a purge leaves.

Events of a deleted session go with it (:mod:`picobot.store.erasure.purge` deletes them in the
session's own transaction). What else a purge or retention takes is here: a user's
events (a user purge), a session's (a session purge: anything written after its rows
went), events older than the retention cutoff, and the learned facts' events when the
facts go. A user or session purge then leaves exactly one ``purge.completed`` row,
written in the transaction of its last delete, that names neither the user nor the
session: the scope's kind, the counts and the operator who ran it. A storage cap takes
the events of what it deleted and leaves one ``retention.capped`` row against the user.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

from picobot.store.conversation.events import record_event
from picobot.store.db import Database

FACT_EVENT_TYPES = (
    "fact.created",
    "fact.reinforced",
    "fact.contradicted",
    "fact.decayed",
    "fact.edited",
    "fact.deleted",
    "pin.added",
    "pin.removed",
)
"""The event types whose payload may name a learned fact (``fact_id``)."""


def delete_fact_events(conn: sqlite3.Connection, fact_ids: str) -> int:
    """Delete the events about the facts in ``fact_ids`` (a JSON array); run it before
    the facts themselves go (their owners narrow the search)."""
    marks = ", ".join("?" for _ in FACT_EVENT_TYPES)
    cur = conn.execute(
        "DELETE FROM events WHERE user_id IN (SELECT DISTINCT user_id FROM facts"  # noqa: S608
        f" WHERE id IN (SELECT value FROM json_each(?1))) AND type IN ({marks})"
        " AND CAST(json_extract(payload_json, '$.fact_id') AS INTEGER)"
        " IN (SELECT value FROM json_each(?1))",
        (fact_ids, *FACT_EVENT_TYPES),
    )
    return int(cur.rowcount)


async def _delete_where(
    db: Database,
    where: str,
    params: tuple[Any, ...],
    batch_size: int,
    last: dict[str, Any] | None = None,
) -> int:
    """Delete events matching ``where``, ``batch_size`` per transaction; how many.

    With ``last``, the keyword arguments of :func:`record_event` for the record written
    in the transaction of the last batch (the one that found fewer than a full batch).
    """
    done = 0
    while True:

        def step(conn: sqlite3.Connection) -> int:
            n = conn.execute(
                f"DELETE FROM events WHERE id IN (SELECT id FROM events WHERE {where}"  # noqa: S608
                " LIMIT ?)",
                (*params, batch_size),
            ).rowcount
            if n < batch_size and last is not None:
                record_event(conn, **last)
            return int(n)

        n = await db.write(step)
        done += n
        if n < batch_size:
            return done
        await asyncio.sleep(0)  # let turns in between batches


async def prune_events_before(db: Database, cutoff: float, batch_size: int) -> int:
    """Delete every event older than ``cutoff`` (retention); how many."""
    return await _delete_where(db, "at < ?", (cutoff,), batch_size)


async def prune_user_events(db: Database, user_id: str, batch_size: int) -> int:
    """Delete every event of ``user_id`` (a user purge); how many."""
    return await _delete_where(db, "user_id = ?", (user_id,), batch_size)


async def finish_purge(
    db: Database,
    kind: str,
    *,
    user_id: str | None = None,
    session_id: str | None = None,
    counts: dict[str, int],
    actor: str | None,
    now: float,
    batch_size: int,
) -> int:
    """Delete the purged user's or session's events, then record ``purge.completed``.

    ``kind`` is the scope's kind (``user``, ``session``, ``older_than``); ``counts`` (rows
    by kind) go into the record, ``actor`` too (None for a user purging their own data:
    their id must not survive the purge). Returns how many events were deleted.
    """
    params: tuple[Any, ...]
    if user_id is not None:
        where, params = "user_id = ?", (user_id,)
    elif session_id is not None:
        where, params = "session_id = ?", (session_id,)
    else:
        where, params = "1 = 0", ()
    payload: dict[str, Any] = {"scope": kind, "counts": counts}
    last = {"type_": "purge.completed", "now": now, "actor": actor, "payload": payload}
    return await _delete_where(db, where, params, batch_size, last)


async def finish_session_cap(
    db: Database, sessions: list[str], record: dict[str, Any], batch_size: int
) -> int:
    """Delete what is left of the events of ``sessions``, which a storage cap deleted
    (those written after their rows went), then record ``record`` (the keyword arguments
    of :func:`record_event`, its ``retention.capped``) in the last batch's transaction."""
    where = "session_id IN (SELECT value FROM json_each(?))"
    return await _delete_where(db, where, (json.dumps(sessions),), batch_size, record)


async def finish_message_cap(
    db: Database, session_id: str, first_kept: int, record: dict[str, Any], batch_size: int
) -> int:
    """Delete the events of ``session_id`` recorded before message ``first_kept`` was
    stored (its messages a storage cap deleted, their tool calls, summaries and facts),
    then record ``record`` as :func:`finish_session_cap` does."""
    where = (
        "session_id = ?1 AND id < COALESCE((SELECT MIN(id) FROM events WHERE session_id = ?1"
        " AND type = 'message.appended'"
        " AND CAST(json_extract(payload_json, '$.message_id') AS INTEGER) = ?2), 0)"
    )
    return await _delete_where(db, where, (session_id, first_kept), batch_size, record)


async def record_purge_step(
    db: Database,
    type_: str,
    kind: str,
    *,
    user_id: str | None,
    session_id: str | None,
    actor: str | None,
    total: int,
    now: float,
) -> None:
    """Record ``purge.requested`` or ``purge.confirmed`` against the purged user or
    session (a session's owner is looked up), so the purge deletes it with the rest."""

    def write(conn: sqlite3.Connection) -> None:
        owner = user_id
        if owner is None and session_id is not None:
            row = conn.execute("SELECT user_id FROM sessions WHERE id = ?", (session_id,))
            found = row.fetchone()
            owner = None if found is None else found[0]
        record_event(
            conn,
            type_,
            now,
            user_id=owner,
            session_id=session_id,
            actor=actor,
            payload={"scope": kind, "total": total},
        )

    await db.write(write)


async def record_alone(
    db: Database, type_: str, now: float, *, actor: str | None, payload: dict[str, Any]
) -> None:
    """Record an event about no user or session (a retention run) in its own write."""
    await db.write(lambda conn: record_event(conn, type_, now, actor=actor, payload=payload))
