"""What the storage caps take: a user's least recently active sessions past the session cap,
a session's oldest exchanges past the message cap (see :mod:`picobot.tasks.caps`).

Only the choice lives here. The deletion is a session purge's
(:meth:`~picobot.store.erasure.purge.PurgeStore.delete_session`) or a message purge's
(:class:`~picobot.store.erasure.message_purge.MessagePurge`), so a cap takes exactly what
those take. Kept whatever the caps say, as retention keeps them: pinned messages and the
sessions holding them. Kept because someone is using them: every session that is a chat's
current one, and the current exchange of a session (its last user message and all after).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

_UNPINNED = "NOT EXISTS (SELECT 1 FROM message_pins p WHERE p.message_id = m.id)"
# ?1 the session, ?2 the first sequence number kept: the removable messages before it.
_REMOVABLE = f"FROM messages m WHERE m.session_id = ?1 AND m.seq_order < ?2 AND {_UNPINNED}"


@dataclass(frozen=True, slots=True)
class CapLimits:
    """The caps in force (0: that cap is off)."""

    sessions: int = 0
    """Most sessions per user."""
    messages: int = 0
    """Most messages per session."""
    trim_to: int = 0
    """What a session past ``messages`` is trimmed down to (at most ``messages``)."""


@dataclass(frozen=True, slots=True)
class StaleSession:
    """A session a cap deletes, as its notice names it."""

    id: str
    last_active: float


@dataclass(frozen=True, slots=True)
class Excess:
    """What is past the caps now: whole sessions of the user, oldest messages of a session."""

    sessions: tuple[StaleSession, ...] = ()
    """The user's least recently active sessions past the session cap, oldest first."""
    messages: tuple[int, ...] = ()
    """Ids of the session's oldest messages past the message cap."""
    first_kept: int | None = None
    """With ``messages``: the id of the message the session now starts at (a user's)."""

    def __bool__(self) -> bool:
        return bool(self.sessions or self.messages)


def excess(conn: sqlite3.Connection, user_id: str, session_id: str, limits: CapLimits) -> Excess:
    """What is past ``limits`` for ``user_id``, who is in ``session_id``, in one snapshot.

    Under the caps this is one or two index counts, which is what a turn pays.
    """
    sessions = _sessions(conn, user_id, session_id, limits.sessions) if limits.sessions else ()
    if not limits.messages:
        return Excess(sessions)
    ids, first_kept = _messages(conn, session_id, limits.messages, limits.trim_to)
    return Excess(sessions, ids, first_kept)


def _sessions(
    conn: sqlite3.Connection, user_id: str, session_id: str, cap: int
) -> tuple[StaleSession, ...]:
    (held,) = conn.execute("SELECT COUNT(*) FROM sessions WHERE user_id = ?", (user_id,)).fetchone()
    if held <= cap:
        return ()
    current = conn.execute("SELECT session_id FROM current_sessions WHERE user_id = ?", (user_id,))
    in_use = {session_id} | {str(r[0]) for r in current}
    rows = conn.execute(
        "SELECT id, last_active FROM sessions s WHERE user_id = ? AND id NOT IN (SELECT value"
        " FROM json_each(?)) AND NOT EXISTS (SELECT 1 FROM message_pins p WHERE p.session_id"
        " = s.id) ORDER BY last_active, id LIMIT ?",
        (user_id, json.dumps(sorted(in_use)), int(held) - cap),
    ).fetchall()
    return tuple(StaleSession(str(r[0]), float(r[1])) for r in rows)


def _messages(
    conn: sqlite3.Connection, session_id: str, cap: int, trim_to: int
) -> tuple[tuple[int, ...], int | None]:
    """The oldest messages to remove, whole exchanges (the session then starts at a user
    message, never an orphaned reply), and the id of the message it starts at."""
    (held,) = conn.execute(
        "SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,)
    ).fetchone()
    if held <= cap:
        return (), None
    (current,) = conn.execute(
        "SELECT MAX(seq_order) FROM messages WHERE session_id = ? AND role = 'user'",
        (session_id,),
    ).fetchone()
    if current is None:
        return (), None  # no exchange to keep whole: nothing is chosen
    need = int(held) - trim_to
    # The need-th removable message, or the last one if fewer are removable (pins).
    last = conn.execute(
        f"SELECT MAX(seq_order) FROM (SELECT m.seq_order {_REMOVABLE}"  # noqa: S608
        " ORDER BY m.seq_order LIMIT ?3) AS removable",
        (session_id, current, need),
    ).fetchone()[0]
    if last is None:
        return (), None
    # The session then starts at the next user message (at the latest, the current one).
    first_id, first_seq = conn.execute(
        "SELECT id, seq_order FROM messages WHERE session_id = ? AND role = 'user' AND"
        " seq_order > ? ORDER BY seq_order LIMIT 1",
        (session_id, last),
    ).fetchone()
    ids = conn.execute(
        f"SELECT m.id {_REMOVABLE} ORDER BY m.seq_order",
        (session_id, first_seq),
    ).fetchall()
    return tuple(int(r[0]) for r in ids), int(first_id)
