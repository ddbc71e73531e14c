"""Message pins: a user keeps chosen messages past retention.

A pin is one row of ``message_pins`` (migration m015) naming a message of one of the
pinning user's own sessions; another user's message is treated as missing. Retention
leaves a pinned message, and the session row it belongs to, in place (see
:func:`picobot.store.erasure.purge._older_scope`); session and user purges delete them like
everything else (the pin goes with its message). Every change records a ``pin.added``
or ``pin.removed`` event in its transaction. Pinned facts are a flag of ``facts``
(:meth:`picobot.store.learned.fact_writes.FactStore.set_pinned`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from picobot.store.conversation.events import record_event
from picobot.store.db import Database

_OWNED = (
    "SELECT m.id, m.session_id FROM messages m JOIN sessions s ON s.id = m.session_id"
    " WHERE m.id = ? AND s.user_id = ?"
)


@dataclass(frozen=True, slots=True)
class PinnedMessage:
    """One pinned message as ``/pins`` lists it."""

    message_id: int
    session_id: str
    role: str
    content: str
    created_at: float
    pinned_at: float


def last_exchange(conn: sqlite3.Connection, user_id: str, session_id: str) -> list[int]:
    """The ids of the last user message of ``user_id``'s session and the reply after it.

    Empty when the session is not theirs or holds no user message; just the user
    message when no reply followed it (yet).
    """
    row = conn.execute(
        "SELECT m.id, m.seq_order FROM messages m JOIN sessions s ON s.id = m.session_id"
        " WHERE m.session_id = ? AND s.user_id = ? AND m.role = 'user'"
        " ORDER BY m.seq_order DESC LIMIT 1",
        (session_id, user_id),
    ).fetchone()
    if row is None:
        return []
    reply = conn.execute(
        "SELECT id FROM messages WHERE session_id = ? AND seq_order > ? AND role = 'assistant'"
        " ORDER BY seq_order LIMIT 1",
        (session_id, int(row[1])),
    ).fetchone()
    return [int(row[0])] + ([int(reply[0])] if reply else [])


class PinStore:
    """Pin, unpin and list messages, always of one user's own sessions."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def last_exchange(self, user_id: str, session_id: str) -> list[int]:
        """See :func:`last_exchange`."""
        return await self._db.read(lambda c: last_exchange(c, user_id, session_id))

    async def set_pinned(
        self, user_id: str, message_ids: Sequence[int], pinned: bool, *, now: float
    ) -> list[int] | None:
        """Pin (or unpin) ``user_id``'s messages; the ids whose state changed.

        None, and nothing changed, when any id is not a message of ``user_id``'s: a
        stranger's message is answered like a missing one.
        """

        def write(conn: sqlite3.Connection) -> list[int] | None:
            owned = [conn.execute(_OWNED, (mid, user_id)).fetchone() for mid in message_ids]
            if any(row is None for row in owned):
                return None
            changed: list[int] = []
            for row in owned:
                mid, sid = int(row[0]), str(row[1])
                if pinned:
                    cur = conn.execute(
                        "INSERT INTO message_pins (message_id, session_id, user_id, created_at)"
                        " VALUES (?, ?, ?, ?) ON CONFLICT (message_id) DO NOTHING",
                        (mid, sid, user_id, now),
                    )
                else:
                    cur = conn.execute(
                        "DELETE FROM message_pins WHERE message_id = ? AND user_id = ?",
                        (mid, user_id),
                    )
                if cur.rowcount:
                    changed.append(mid)
                    record_event(
                        conn,
                        "pin.added" if pinned else "pin.removed",
                        now,
                        user_id=user_id,
                        session_id=sid,
                        payload={"kind": "message", "message_id": mid},
                    )
            return changed

        return await self._db.write(write)

    async def list(self, user_id: str, limit: int) -> list[PinnedMessage]:
        """``user_id``'s pinned messages, oldest first, at most ``limit``."""

        def read(conn: sqlite3.Connection) -> list[PinnedMessage]:
            rows = conn.execute(
                "SELECT m.id, m.session_id, m.role, picobot_open(m.content) AS content,"
                " m.created_at, p.created_at"
                " FROM message_pins p JOIN messages m ON m.id = p.message_id"
                " WHERE p.user_id = ? ORDER BY m.id LIMIT ?",
                (user_id, limit),
            ).fetchall()
            return [PinnedMessage(int(r[0]), str(r[1]), r[2], r[3], r[4], r[5]) for r in rows]

        return await self._db.read(read)
