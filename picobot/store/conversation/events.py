"""Events: a content-free record of what happened, written with what it records.

:func:`record_event` runs on the writer's plain ``sqlite3`` connection inside the
caller's transaction, so an event exists exactly when the change it describes was
committed. Reads take a plain connection so they run inside one read snapshot. A
payload carries ids and counts only: events outlive nothing they describe (retention
and purges delete them with their data) but must never be a second copy of content.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from picobot.store.connection import AsyncConnection
from picobot.store.db import Row

EVENT_TYPES: frozenset[str] = frozenset(
    {
        "session.started",
        "session.forked",
        "session.resumed",
        "message.appended",
        "tool.started",
        "tool.completed",
        "summary.updated",
        "fact.created",
        "fact.reinforced",
        "fact.contradicted",
        "fact.decayed",
        "fact.edited",
        "fact.deleted",
        "memory.saved",
        "memory.deleted",
        "pin.added",
        "pin.removed",
        "reflection.stored",
        "digest.updated",
        "purge.requested",
        "purge.confirmed",
        "purge.completed",
        "retention.completed",
        "retention.capped",
    }
)

_COLUMNS = "id, at, user_id, session_id, type, actor, payload_json"


@dataclass(frozen=True, slots=True)
class Event:
    """One stored event."""

    id: int
    at: float
    user_id: str | None
    session_id: str | None
    type: str
    actor: str | None
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events a read returns; every field set narrows it (AND)."""

    user_id: str | None = None
    session_id: str | None = None
    types: tuple[str, ...] = ()
    exclude_types: tuple[str, ...] = ()
    since: float | None = None
    after_id: int | None = None

    def where(self) -> tuple[str, list[Any]]:
        """The SQL condition and its parameters."""
        parts: list[str] = []
        params: list[Any] = []
        if self.user_id is not None:
            parts.append("user_id = ?")
            params.append(self.user_id)
        if self.session_id is not None:
            parts.append("session_id = ?")
            params.append(self.session_id)
        if self.types:
            parts.append(f"type IN ({', '.join('?' for _ in self.types)})")
            params.extend(self.types)
        if self.exclude_types:
            parts.append(f"type NOT IN ({', '.join('?' for _ in self.exclude_types)})")
            params.extend(self.exclude_types)
        if self.since is not None:
            parts.append("at >= ?")
            params.append(self.since)
        if self.after_id is not None:
            parts.append("id > ?")
            params.append(self.after_id)
        return (" AND ".join(parts) or "1"), params


def record_event(
    conn: sqlite3.Connection,
    type_: str,
    now: float,
    *,
    user_id: str | None = None,
    session_id: str | None = None,
    actor: str | None = None,
    payload: dict[str, Any] | None = None,
) -> int:
    """Append one event in the caller's transaction; return its id.

    ``payload`` must hold ids and counts only (JSON-serializable); an unknown type is a
    programming error and raises ValueError rather than storing an event nobody reads.
    """
    if type_ not in EVENT_TYPES:
        raise ValueError(f"unknown event type {type_!r}")
    cur = conn.execute(
        "INSERT INTO events (at, user_id, session_id, type, actor, payload_json)"
        " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
        (
            now,
            user_id,
            session_id,
            type_,
            actor,
            json.dumps(payload or {}, sort_keys=True, separators=(",", ":")),
        ),
    )
    return int(cur.fetchone()[0])


async def record_event_in(
    conn: AsyncConnection,
    type_: str,
    now: float,
    *,
    user_id: str | None = None,
    session_id: str | None = None,
    actor: str | None = None,
    payload: dict[str, Any] | None = None,
) -> int:
    """:func:`record_event` inside a :meth:`Database.transaction` block (its connection)."""
    return await conn.run(
        lambda c: record_event(
            c, type_, now, user_id=user_id, session_id=session_id, actor=actor, payload=payload
        )
    )


def event_from_row(row: Row) -> Event:
    """An :class:`Event` from a row of ``events``."""
    return Event(
        id=int(row["id"]),
        at=float(row["at"]),
        user_id=row["user_id"],
        session_id=row["session_id"],
        type=str(row["type"]),
        actor=row["actor"],
        payload=json.loads(row["payload_json"]),
    )


def list_events(
    conn: sqlite3.Connection, where: EventFilter, limit: int, *, newest_first: bool = False
) -> list[Event]:
    """Events matching ``where``, oldest first (by id), at most ``limit``: the oldest
    ``limit`` of them, or with ``newest_first`` the newest ``limit``, newest first."""
    cond, params = where.where()
    order = "DESC" if newest_first else "ASC"
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM events WHERE {cond} ORDER BY id {order} LIMIT ?",  # noqa: S608
        (*params, limit),
    ).fetchall()
    return [event_from_row(r) for r in rows]


def latest_event_id(conn: sqlite3.Connection) -> int:
    """The id of the newest event (0 when there is none): where a live stream starts."""
    row = conn.execute("SELECT MAX(id) FROM events").fetchone()
    return int(row[0] or 0)
