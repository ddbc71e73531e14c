"""Sessions and the current session of each chat."""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass

from picobot.store.connection import AsyncConnection
from picobot.store.conversation.events import record_event_in
from picobot.store.db import Database, Row


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A session row with its message count."""

    id: str
    user_id: str
    channel: str
    chat_id: str
    parent_session_id: str | None
    created_at: float
    last_active: float
    message_count: int


@dataclass(frozen=True, slots=True)
class SessionPage:
    """One page of a session listing; ``next_offset`` is None on the last page."""

    sessions: list[SessionInfo]
    next_offset: int | None


ChatKey = tuple[str, str, str]
"""A chat: (channel, chat_id, user_id); each has at most one current session."""

CURRENT_SQL = (
    "SELECT session_id FROM current_sessions WHERE channel = ? AND chat_id = ? AND user_id = ?"
)


def new_session_id() -> str:
    """A short random id that is easy to type in /resume."""
    return secrets.token_hex(6)


SESSION_SELECT = (
    "SELECT s.id, s.user_id, s.channel, s.chat_id, s.parent_session_id, s.created_at,"
    " s.last_active, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) AS n"
    " FROM sessions s"
)
"""The columns of :func:`session_info`; a caller appends its WHERE, ORDER and LIMIT."""


def existing_sessions(conn: sqlite3.Connection, ids: Iterable[str]) -> set[str]:
    """Which of these session ids are still stored (a purge or retention may have
    removed some, in this process or another)."""
    rows = conn.execute(
        "SELECT id FROM sessions WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps(sorted(ids)),),
    )
    return {str(row[0]) for row in rows}


def session_info(row: Row) -> SessionInfo:
    """A row of :data:`SESSION_SELECT` as a :class:`SessionInfo`."""
    return SessionInfo(
        id=row["id"],
        user_id=row["user_id"],
        channel=row["channel"],
        chat_id=row["chat_id"],
        parent_session_id=row["parent_session_id"],
        created_at=row["created_at"],
        last_active=row["last_active"],
        message_count=row["n"],
    )


class SessionRepo:
    """Create, find and switch sessions."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def ids_of(self, user_id: str) -> list[str]:
        """The ids of every session of ``user_id``."""
        rows = await self._db.fetchall("SELECT id FROM sessions WHERE user_id = ?", (user_id,))
        return [str(r[0]) for r in rows]

    async def get(self, session_id: str) -> SessionInfo | None:
        """One session by id."""
        row = await self._db.fetchone(SESSION_SELECT + " WHERE s.id = ?", (session_id,))
        return session_info(row) if row else None

    async def list_sessions(self, user_id: str | None = None, limit: int = 50) -> list[SessionInfo]:
        """Sessions, most recently active first; only ``user_id``'s when given."""
        return (await self.page(user_id, limit=limit)).sessions

    async def page(self, user_id: str | None = None, *, limit: int, offset: int = 0) -> SessionPage:
        """``limit`` sessions after skipping ``offset``, most recently active first.

        Ties on ``last_active`` are broken by id, so consecutive pages neither repeat
        nor skip a session that nobody touched meanwhile.
        """
        where, args = (" WHERE s.user_id = ?", [user_id]) if user_id is not None else ("", [])
        # One row more than asked tells whether another page exists.
        rows = await self._db.fetchall(
            SESSION_SELECT + where + " ORDER BY s.last_active DESC, s.id LIMIT ? OFFSET ?",
            [*args, limit + 1, offset],
        )
        more = len(rows) > limit
        return SessionPage(
            [session_info(r) for r in rows[:limit]], offset + limit if more else None
        )

    async def current(self, channel: str, chat_id: str, user_id: str) -> str | None:
        """The session this chat is talking in, if any."""
        row = await self._db.fetchone(CURRENT_SQL, (channel, chat_id, user_id))
        return str(row["session_id"]) if row else None

    async def create(
        self,
        channel: str,
        chat_id: str,
        user_id: str,
        *,
        parent_session_id: str | None = None,
        before_seq: int | None = None,
        make_current: bool = True,
    ) -> str:
        """Start a session (optionally as a fork) and make it the chat's current one.

        A fork carries the parent's transcript; with ``before_seq`` (``/edit``) only the
        messages before that one, and the parent's summary only if it covers none of the
        rest (the branch's summary is written again from its own messages). Records
        ``session.started`` (``session.forked`` for a fork) in the same write.
        """
        async with self._db.transaction() as conn:
            if parent_session_id is None:
                session_id = await _insert(conn, channel, chat_id, user_id, None)
            else:
                session_id = await _fork(
                    conn, (channel, chat_id, user_id), parent_session_id, before_seq
                )
            if make_current:
                await _set_current(conn, channel, chat_id, user_id, session_id)
        return session_id

    async def current_or_create(self, channel: str, chat_id: str, user_id: str) -> str:
        """The chat's current session, created if it has none, in one write: two first
        messages of a new chat arriving together (or from two processes) share one."""
        async with self._db.transaction() as conn:
            async with conn.execute(CURRENT_SQL, (channel, chat_id, user_id)) as cur:
                row = await cur.fetchone()
            if row is not None:
                return str(row[0])
            session_id = await _insert(conn, channel, chat_id, user_id, None)
            await _set_current(conn, channel, chat_id, user_id, session_id)
        return session_id

    async def set_current(self, channel: str, chat_id: str, user_id: str, session_id: str) -> None:
        """Switch the chat to an existing session (ownership is the caller's check).

        A real switch records ``session.resumed``; naming the current one again does not.
        """
        async with self._db.transaction() as conn:
            if await _set_current(conn, channel, chat_id, user_id, session_id):
                await record_event_in(
                    conn, "session.resumed", time.time(), user_id=user_id, session_id=session_id
                )


async def _insert(
    conn: AsyncConnection,
    channel: str,
    chat_id: str,
    user_id: str,
    parent: str | None,
    fork: tuple[int, bool] | None = None,
) -> str:
    """A new session row; a fork's ``fork`` is (its ``fork_seq``, whether ``/edit`` made it)."""
    session_id, now = new_session_id(), time.time()
    fork_seq, edit = fork if fork is not None else (None, False)
    await conn.execute(
        "INSERT INTO sessions (id, parent_session_id, channel, chat_id, user_id,"
        " created_at, last_active, fork_seq, fork_edit) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (session_id, parent, channel, chat_id, user_id, now, now, fork_seq, int(edit)),
    )
    kind = "session.started" if parent is None else "session.forked"
    payload: dict[str, object] = {"channel": channel}
    if parent is not None:
        payload["parent_session_id"] = parent
    if edit:
        payload["edited_seq"] = fork_seq
    await record_event_in(conn, kind, now, user_id=user_id, session_id=session_id, payload=payload)
    return session_id


async def _fork(conn: AsyncConnection, chat: ChatKey, parent: str, before_seq: int | None) -> str:
    """A fork of ``parent`` with a copy of its messages before ``before_seq`` (None: all
    of them), and its summary if that covers only copied messages."""
    if before_seq is None:
        async with conn.execute(
            "SELECT COALESCE(MAX(seq_order), 0) + 1 FROM messages WHERE session_id = ?",
            (parent,),
        ) as cur:
            row = await cur.fetchone()
        fork_seq = int(row[0]) if row else 1
    else:
        fork_seq = before_seq
    channel, chat_id, user_id = chat
    session_id = await _insert(
        conn, channel, chat_id, user_id, parent, (fork_seq, before_seq is not None)
    )
    # The copies keep their seq_order, so the summary covers the same numbers in the copy.
    await conn.execute(
        "INSERT INTO messages (session_id, seq_order, role, content, token_estimate,"
        " created_at) SELECT ?1, seq_order, role, content, token_estimate, created_at"
        " FROM messages WHERE session_id = ?2 AND seq_order < ?3 ORDER BY seq_order",
        (session_id, parent, fork_seq),
    )
    await conn.execute(
        "INSERT INTO session_summaries (session_id, summary, covered_seq, token_estimate,"
        " updated_at) SELECT ?1, summary, covered_seq, token_estimate, updated_at"
        " FROM session_summaries WHERE session_id = ?2 AND covered_seq < ?3",
        (session_id, parent, fork_seq),
    )
    return session_id


async def _set_current(
    conn: AsyncConnection, channel: str, chat_id: str, user_id: str, sid: str
) -> bool:
    """Point the chat at ``sid``; whether that changed anything."""
    async with conn.execute(
        "INSERT INTO current_sessions (channel, chat_id, user_id, session_id)"
        " VALUES (?, ?, ?, ?) ON CONFLICT (channel, chat_id, user_id)"
        " DO UPDATE SET session_id = excluded.session_id"
        " WHERE current_sessions.session_id <> excluded.session_id",
        (channel, chat_id, user_id, sid),
    ) as cur:
        return cur.rowcount > 0
