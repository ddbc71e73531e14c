"""Messages: append-only, ordered per session by ``seq_order``."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from picobot.store.conversation.events import record_event
from picobot.store.conversation.sessions import CURRENT_SQL, ChatKey
from picobot.store.db import Database


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One persisted message."""

    id: int
    session_id: str
    seq_order: int
    role: str
    content: str
    token_estimate: int
    created_at: float


_COLUMNS = (
    "id, session_id, seq_order, role, picobot_open(content) AS content, token_estimate, created_at"
)
_INSERT = (
    "INSERT INTO messages (session_id, seq_order, role, content, token_estimate,"
    " created_at, source_id) VALUES (?, (SELECT COALESCE(MAX(seq_order), 0) + 1 FROM"
    " messages WHERE session_id = ?), ?, picobot_seal(?, ?), ?, ?, ?) RETURNING id, seq_order"
)
_BY_SOURCE = f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND source_id = ?"  # noqa: S608
_AT_SEQ = f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND seq_order = ?"  # noqa: S608
_NO_SEQ = 2**62
"""Above every sequence number: "before it" means from the newest message."""
_TOUCH = "UPDATE sessions SET last_active = MAX(last_active, ?) WHERE id = ? RETURNING user_id"


def last_messages(conn: sqlite3.Connection, session_id: str, limit: int) -> list[StoredMessage]:
    """The last ``limit`` messages of a session, oldest first (in a reader thread)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM messages WHERE session_id = ?"  # noqa: S608 - constant columns
        " ORDER BY seq_order DESC LIMIT ?",
        (session_id, limit),
    ).fetchall()
    return [StoredMessage(*tuple(r)) for r in reversed(rows)]


@dataclass(frozen=True, slots=True)
class MessagePage:
    """Messages of one session, oldest first; ``next_before_seq`` pages back (None: first)."""

    messages: list[StoredMessage]
    next_before_seq: int | None


class NotCurrentSession(Exception):
    """The session is no longer the chat's current one (``append(if_current_of=...)``)."""


class SessionGone(NotCurrentSession):
    """The session no longer exists: it was purged (or expired) while a turn ran in it."""


class MessageHeld(Exception):
    """``append(unless=...)``'s check was true: the message was not stored."""


HoldCheck = Callable[[sqlite3.Connection], bool]
"""A check run in the write that would store a message (see ``MessageRepo.append``)."""


def conversation_after(
    conn: sqlite3.Connection, session_id: str, after_seq: int, limit: int
) -> list[StoredMessage]:
    """The first ``limit`` user and assistant messages of ``session_id`` after position
    ``after_seq``, in order: what a background reader (extraction, reflection) has not
    read yet."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND seq_order > ?"  # noqa: S608
        " AND role IN ('user', 'assistant') ORDER BY seq_order LIMIT ?",
        (session_id, after_seq, limit),
    ).fetchall()
    return [StoredMessage(*tuple(r)) for r in rows]


def existing_ids(conn: sqlite3.Connection, ids: Iterable[int]) -> set[int]:
    """Which of these message ids are still stored (a purge may have removed some)."""
    wanted = json.dumps(sorted(ids))
    rows = conn.execute(
        "SELECT id FROM messages WHERE id IN (SELECT value FROM json_each(?))", (wanted,)
    )
    return {int(row[0]) for row in rows}


class MessageRepo:
    """Append and read messages."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def append(
        self,
        session_id: str,
        role: str,
        content: str,
        token_estimate: int | Callable[[str], int],
        *,
        created_at: float | None = None,
        source_id: str | None = None,
        if_current_of: ChatKey | None = None,
        unless: HoldCheck | None = None,
    ) -> StoredMessage:
        """Commit one message at the end of its session and touch the session.

        ``source_id`` names the message at its channel (see m007_message_sources); a
        channel that may hand a message over twice (a webhook turn run again after a
        crash) passes it. When the session holds that message already (same
        ``source_id``, same content), nothing is written and the stored one comes back;
        :meth:`following` then finds its reply, if that was stored too. A ``source_id``
        reused for other content is another message, stored without the id.

        With ``if_current_of``, the message is stored only if ``session_id`` is still
        that chat's current session, checked in the same transaction: else nothing is
        stored and :class:`NotCurrentSession` is raised. A session that no longer exists
        raises :class:`SessionGone` (a NotCurrentSession) in any case. A session switched
        or deleted meanwhile (a command, another process, a purge) is never written to,
        which lets the kernel skip the read that looks the session up when it remembers
        it.

        ``content`` is redacted (:attr:`Database.redact`) before it is compared or stored;
        ``token_estimate`` may be an estimator, then it counts the redacted text.
        A stored message records ``message.appended`` (ids and role) in the same write.
        """
        now = time.time() if created_at is None else created_at
        content = self._db.redact(content)
        tokens = token_estimate(content) if callable(token_estimate) else token_estimate

        def insert(conn: sqlite3.Connection) -> StoredMessage:
            if unless is not None and unless(conn):
                raise MessageHeld(session_id)
            if if_current_of is not None:
                row = conn.execute(CURRENT_SQL, if_current_of).fetchone()
                if row is None or row[0] != session_id:
                    raise NotCurrentSession(session_id)
            source = source_id
            if source is not None:
                found = conn.execute(_BY_SOURCE, (session_id, source)).fetchone()
                stored = None if found is None else StoredMessage(*tuple(found))
                if stored is not None and stored.content == content:
                    return stored
                if stored is not None:
                    source = None
            # Touched first: no row touched means the session is gone (a purge while the
            # model was answering), said plainly rather than as a foreign-key failure.
            owner = conn.execute(_TOUCH, (now, session_id)).fetchone()
            if owner is None:
                raise SessionGone(session_id)
            args = (session_id, session_id, role, owner[0], content, tokens, now, source)
            msg_id, seq = conn.execute(_INSERT, args).fetchone()
            # Ids and role only: the event stream never carries what was said.
            record_event(
                conn,
                "message.appended",
                now,
                user_id=owner[0],
                session_id=session_id,
                payload={"message_id": msg_id, "role": role, "seq_order": seq},
            )
            return StoredMessage(msg_id, session_id, seq, role, content, tokens, now)

        # One trip to the writer thread, group-committed with concurrent turns.
        return await self._db.write(insert)

    async def following(self, message: StoredMessage) -> StoredMessage | None:
        """The message right after ``message`` in its session, if there is one."""
        rows = await self._db.fetchall(_AT_SEQ, (message.session_id, message.seq_order + 1))
        return StoredMessage(*tuple(rows[0])) if rows else None

    async def last(self, session_id: str, limit: int) -> list[StoredMessage]:
        """The last ``limit`` messages of a session, oldest first."""
        return await self._db.read(lambda conn: last_messages(conn, session_id, limit))

    async def page_before(
        self, session_id: str, *, limit: int, before_seq: int | None = None
    ) -> MessagePage:
        """The ``limit`` messages just before ``before_seq`` (default: the newest).

        Paging by sequence number rather than offset keeps pages stable while the
        session grows at its end.
        """
        # One row more than asked tells whether an older page exists.
        rows = await self._db.fetchall(
            f"SELECT {_COLUMNS} FROM messages"  # noqa: S608 - constant columns
            " WHERE session_id = ? AND seq_order < ? ORDER BY seq_order DESC LIMIT ?",
            (session_id, _NO_SEQ if before_seq is None else before_seq, limit + 1),
        )
        page = [StoredMessage(*tuple(r)) for r in reversed(rows[:limit])]
        return MessagePage(page, page[0].seq_order if len(rows) > limit else None)

    async def count(self, session_id: str) -> int:
        """How many messages a session holds."""
        row = await self._db.fetchone(
            "SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,)
        )
        return int(row[0]) if row else 0
