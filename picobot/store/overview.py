"""Reads for the operator dashboard: counts, listings across users, session previews.

Each takes a plain ``sqlite3`` connection (run through :meth:`Database.read`) so a page
is drawn from one read snapshot. Nothing here writes.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from picobot.store.conversation.events import Event, EventFilter, list_events
from picobot.store.conversation.sessions import SESSION_SELECT, SessionInfo, session_info

PREVIEW_CHARS = 120
"""How much of a session's first user message its listing row shows."""


@dataclass(frozen=True, slots=True)
class StoreCounts:
    """How much is stored, for the overview card."""

    users: int
    sessions: int
    messages: int
    facts: int
    active_facts: int
    memories: int


@dataclass(frozen=True, slots=True)
class StatusCounts:
    """What ``picobot status`` counts: sessions, messages, memories, messages waiting
    for the recall index."""

    sessions: int
    messages: int
    memories: int
    queued_for_index: int


def status_counts(conn: sqlite3.Connection) -> StatusCounts:
    """The counts ``picobot status`` shows (one query)."""
    row = conn.execute(
        "SELECT (SELECT COUNT(*) FROM sessions), (SELECT COUNT(*) FROM messages),"
        " (SELECT COUNT(*) FROM user_memories), (SELECT COUNT(*) FROM search_pending)"
    ).fetchone()
    return StatusCounts(*(int(v) for v in tuple(row)))


def store_counts(conn: sqlite3.Connection) -> StoreCounts:
    """Rows of each kind; ``users`` counts everyone with a session, a memory or a fact."""
    row = conn.execute(
        "SELECT (SELECT COUNT(*) FROM (SELECT user_id FROM sessions UNION"
        " SELECT user_id FROM user_memories UNION SELECT user_id FROM facts)),"
        " (SELECT COUNT(*) FROM sessions), (SELECT COUNT(*) FROM messages),"
        " (SELECT COUNT(*) FROM facts), (SELECT COUNT(*) FROM facts WHERE active = 1),"
        " (SELECT COUNT(*) FROM user_memories)"
    ).fetchone()
    return StoreCounts(*(int(v) for v in tuple(row)))


@dataclass(frozen=True, slots=True)
class SessionPreview:
    """A session with the start of its first user message and its forks."""

    info: SessionInfo
    preview: str
    forks: int


def session_previews(
    conn: sqlite3.Connection,
    *,
    user_id: str | None,
    text: str | None,
    limit: int,
    offset: int,
) -> list[SessionPreview]:
    """Sessions, most recently active first; ``text`` matches (case-insensitively) the
    session id, the user id or any message of the session.

    Messages are sealed, so a ``text`` filter opens them here, session by session in
    listing order, until the page is full.
    """
    parts: list[str] = []
    params: list[Any] = []
    if user_id is not None:
        parts.append("s.user_id = ?")
        params.append(user_id)
    where = " WHERE " + " AND ".join(parts) if parts else ""
    order = f"{SESSION_SELECT}{where} ORDER BY s.last_active DESC, s.id"
    if text:
        needle = text.lower()
        wanted = offset + max(0, limit)
        matched: list[SessionInfo] = []
        for row in conn.execute(order, params).fetchall():
            if len(matched) >= wanted:
                break
            info = session_info(row)
            if _session_matches(conn, info, needle):
                matched.append(info)
        listed = matched[offset:wanted]
    else:
        rows = conn.execute(f"{order} LIMIT ? OFFSET ?", (*params, limit, offset)).fetchall()
        listed = [session_info(r) for r in rows]
    out = []
    for info in listed:
        first = conn.execute(
            "SELECT picobot_open(content) AS content FROM messages"
            " WHERE session_id = ? AND role = 'user' ORDER BY seq_order LIMIT 1",
            (info.id,),
        ).fetchone()
        forks = conn.execute(
            "SELECT COUNT(*) FROM sessions WHERE parent_session_id = ?", (info.id,)
        ).fetchone()
        preview = str(first[0]) if first else ""
        if len(preview) > PREVIEW_CHARS:
            preview = preview[:PREVIEW_CHARS] + "…"
        out.append(SessionPreview(info, preview, int(forks[0])))
    return out


def _session_matches(conn: sqlite3.Connection, info: SessionInfo, needle: str) -> bool:
    """Whether the lower-case ``needle`` is in the session's id, user id or a message."""
    if needle in info.id.lower() or needle in info.user_id.lower():
        return True
    cursor = conn.execute(
        "SELECT picobot_open(content) AS content FROM messages WHERE session_id = ?",
        (info.id,),
    )
    return any(needle in str(row[0]).lower() for row in cursor)


def session_family(conn: sqlite3.Connection, session_id: str) -> tuple[list[str], list[str]]:
    """The ids of a session's ancestors (its parent first) and of its direct forks."""
    ancestors: list[str] = []
    current = session_id
    seen = {session_id}
    while True:
        row = conn.execute(
            "SELECT parent_session_id FROM sessions WHERE id = ?", (current,)
        ).fetchone()
        if row is None or row[0] is None or row[0] in seen:
            break
        current = str(row[0])
        seen.add(current)
        ancestors.append(current)
    forks = [
        str(r[0])
        for r in conn.execute(
            "SELECT id FROM sessions WHERE parent_session_id = ? ORDER BY created_at",
            (session_id,),
        ).fetchall()
    ]
    return ancestors, forks


def recent_events(conn: sqlite3.Connection, limit: int) -> list[Event]:
    """The newest ``limit`` events, newest first (ids have gaps: purges, retention)."""
    return list_events(conn, EventFilter(), limit, newest_first=True)
