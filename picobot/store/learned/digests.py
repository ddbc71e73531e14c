"""Session reflections and per-user digests: the rows, their reads and writes.

One table, ``digests`` (migration m015): level 0 is the reflection of one session's
message range, level L >= 1 a digest folding ``fanout`` rows of level L-1, which then
point at it (``parent_id``). A digest marked ``stale`` lost a source to a purge: its
text was emptied at once (see :mod:`picobot.store.learned.digest_purge`) and is rebuilt from
the sources that remain. A fold or rebuild writes only if the rows it read are still
there unchanged (a model answers slowly; a purge may run meanwhile). Every write
records its event (``reflection.stored``, ``digest.updated``) in the same transaction;
payloads hold ids and counts only.
Every per-user read takes the owner's id and touches only that owner's rows.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from picobot.store.conversation.events import record_event
from picobot.store.conversation.messages import SessionGone, StoredMessage, conversation_after
from picobot.store.conversation.summaries import get_summary
from picobot.store.db import Database

LAYER_KINDS = frozenset({"reflection", "digest"})
"""The recall-hit kinds of this table's rows (see picobot.store.retrieval.search_kinds)."""

_COLUMNS = (
    "id, user_id, level, session_id, first_message_id, last_message_id, first_seq,"
    " last_seq, picobot_open(text) AS text, token_estimate, parent_id, stale, created_at,"
    " updated_at"
)


@dataclass(frozen=True, slots=True)
class Digest:
    """A reflection (level 0) or a digest (level >= 1)."""

    id: int
    user_id: str
    level: int
    session_id: str | None
    first_message_id: int | None
    last_message_id: int | None
    first_seq: int | None
    last_seq: int | None
    text: str
    token_estimate: int
    parent_id: int | None
    stale: bool
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class Provenance:
    """The message range of one session a reflection covers."""

    session_id: str
    first_message_id: int
    last_message_id: int
    first_seq: int
    last_seq: int


def _digest(row: sqlite3.Row) -> Digest:
    values = list(row)
    values[11] = bool(values[11])
    return Digest(*values)


def _select(conn: sqlite3.Connection, where: str, params: Sequence[object]) -> list[Digest]:
    sql = f"SELECT {_COLUMNS} FROM digests WHERE {where}"  # noqa: S608 - constant clauses
    return [_digest(r) for r in conn.execute(sql, tuple(params)).fetchall()]


def reflected_seq(conn: sqlite3.Connection, session_id: str) -> int:
    """The last ``seq_order`` of ``session_id`` a reflection covers (0: none)."""
    row = conn.execute(
        "SELECT MAX(last_seq) FROM digests WHERE level = 0 AND session_id = ?", (session_id,)
    ).fetchone()
    return int(row[0] or 0) if row else 0


def idle_sessions(conn: sqlite3.Connection, idle_before: float, limit: int) -> list[str]:
    """Sessions last active at or before ``idle_before`` with a user message no
    reflection covers yet, the longest idle first."""
    rows = conn.execute(
        "SELECT s.id FROM sessions s WHERE s.last_active <= ? AND EXISTS (SELECT 1"
        " FROM messages m WHERE m.session_id = s.id AND m.role = 'user' AND m.seq_order >"
        " (SELECT COALESCE(MAX(d.last_seq), 0) FROM digests d WHERE d.level = 0"
        " AND d.session_id = s.id)) ORDER BY s.last_active LIMIT ?",
        (idle_before, limit),
    ).fetchall()
    return [str(r[0]) for r in rows]


def unreflected(
    conn: sqlite3.Connection, session_id: str, limit: int
) -> tuple[list[StoredMessage], str | None]:
    """The first ``limit`` user and assistant messages of ``session_id`` no reflection
    covers, in order, and the session's summary (None: none)."""
    messages = conversation_after(conn, session_id, reflected_seq(conn, session_id), limit)
    summary = get_summary(conn, session_id)
    return messages, summary.summary if summary else None


def user_digests(conn: sqlite3.Connection, user_id: str, limit: int | None = None) -> list[Digest]:
    """``user_id``'s reflections and digests, by level, oldest first."""
    return _select(
        conn, "user_id = ? ORDER BY level, id LIMIT ?", (user_id, -1 if limit is None else limit)
    )


def unfolded(conn: sqlite3.Connection, user_id: str, level: int, limit: int) -> list[Digest]:
    """The oldest ``limit`` rows of ``level`` not folded into a digest yet (with text)."""
    return _select(
        conn,
        "user_id = ? AND level = ? AND parent_id IS NULL AND stale = 0 AND text <> ''"
        " ORDER BY id LIMIT ?",
        (user_id, level, limit),
    )


def children(conn: sqlite3.Connection, digest_id: int) -> list[Digest]:
    """The rows folded into ``digest_id``, oldest first."""
    return _select(conn, "parent_id = ? ORDER BY id", (digest_id,))


def stale_digests(conn: sqlite3.Connection, limit: int) -> list[Digest]:
    """Digests waiting for a rebuild, lowest level first (a parent after its children)."""
    return _select(conn, "stale = 1 ORDER BY level, id LIMIT ?", (limit,))


def layers_intact(conn: sqlite3.Connection, shown: Mapping[int, float]) -> bool:
    """Whether every one of these rows (id -> ``updated_at``) still has the same text."""
    if not shown:
        return True
    row = conn.execute(
        "SELECT COUNT(*) FROM digests d JOIN json_each(?) j ON d.id = CAST(j.key AS INTEGER)"
        " WHERE d.text <> '' AND d.updated_at = j.value",
        (json.dumps({str(k): v for k, v in shown.items()}),),
    ).fetchone()
    return int(row[0]) == len(shown) if row else False


def _unchanged(now: Sequence[Digest], read: Sequence[Digest]) -> bool:
    """Whether ``now`` (rows as they are in the write) are exactly the rows ``read``
    (same ids, same ``updated_at``), each fresh and with text: a model's answer made
    from ``read`` holds nothing a purge has taken since."""
    if not read or len(now) != len(read):
        return False
    was = {d.id: d.updated_at for d in read}
    return all(was.get(d.id) == d.updated_at and d.text and not d.stale for d in now)


class DigestStore:
    """Writes of reflections and digests, each with its event."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def add_reflection(
        self, user_id: str, source: Provenance, text: str, tokens: int, *, now: float
    ) -> int:
        """Store a reflection of ``source``; :class:`SessionGone` if the session is not
        (or no longer) ``user_id``'s, checked in the same write.

        An empty ``text`` (the model's answer was dropped) stores a row that only marks
        the range as read: no event, never folded, recalled or exported.
        """

        def write(conn: sqlite3.Connection) -> int:
            owner = conn.execute(
                "SELECT user_id FROM sessions WHERE id = ?", (source.session_id,)
            ).fetchone()
            if owner is None or owner[0] != user_id:
                raise SessionGone(source.session_id)
            cur = conn.execute(
                "INSERT INTO digests (user_id, level, session_id, first_message_id,"
                " last_message_id, first_seq, last_seq, text, token_estimate, created_at,"
                " updated_at) VALUES (?1, 0, ?2, ?3, ?4, ?5, ?6, picobot_seal(?1, ?7), ?8, ?9,"
                " ?10) RETURNING id",
                (
                    user_id,
                    source.session_id,
                    source.first_message_id,
                    source.last_message_id,
                    source.first_seq,
                    source.last_seq,
                    text,
                    tokens,
                    now,
                    now,
                ),
            )
            rid = int(cur.fetchone()[0])
            if not text:  # a dropped answer: the row only marks the range as read
                return rid
            record_event(
                conn,
                "reflection.stored",
                now,
                user_id=user_id,
                session_id=source.session_id,
                payload={
                    "reflection_id": rid,
                    "first_message_id": source.first_message_id,
                    "last_message_id": source.last_message_id,
                },
            )
            return rid

        return await self._db.write(write)

    async def add_digest(
        self,
        user_id: str,
        level: int,
        sources: Sequence[Digest],
        text: str,
        tokens: int,
        *,
        now: float,
    ) -> int | None:
        """A new digest of ``level`` folding ``sources`` (rows of ``level - 1`` as read).

        Checked in the write: every source is still unfolded, fresh and exactly as read
        (same ``updated_at``, with text), so a purge (and a rebuild after it) while the
        model answered leaves nothing of the purged session in the digest. None, and
        nothing stored, otherwise: the caller folds again from what is there.
        """

        def write(conn: sqlite3.Connection) -> int | None:
            ids = json.dumps([d.id for d in sources])
            now_rows = _select(
                conn,
                "id IN (SELECT value FROM json_each(?)) AND user_id = ? AND level = ?"
                " AND parent_id IS NULL",
                (ids, user_id, level - 1),
            )
            if not _unchanged(now_rows, sources):
                return None
            cur = conn.execute(
                "INSERT INTO digests (user_id, level, text, token_estimate, created_at,"
                " updated_at) VALUES (?1, ?2, picobot_seal(?1, ?3), ?4, ?5, ?6) RETURNING id",
                (user_id, level, text, tokens, now, now),
            )
            did = int(cur.fetchone()[0])
            conn.execute(
                "UPDATE digests SET parent_id = ? WHERE id IN (SELECT value FROM json_each(?))",
                (did, ids),
            )
            _updated(conn, user_id, did, level, len(sources), now, "folded")
            return did

        return await self._db.write(write)

    async def rebuilt(
        self, digest: Digest, sources: Sequence[Digest], text: str, tokens: int, *, now: float
    ) -> bool:
        """Store the rebuilt text of a stale digest, made from ``sources`` (its children
        as read); whether it was stored.

        Nothing is written (the digest stays stale and empty) unless its children are
        still exactly ``sources``, unchanged, fresh and with text, and it is still
        stale: a purge while the model answered must not bring the purged text back.
        """

        def write(conn: sqlite3.Connection) -> bool:
            if not _unchanged(children(conn, digest.id), sources):
                return False
            cur = conn.execute(
                "UPDATE digests SET text = picobot_seal(?, ?), token_estimate = ?, stale = 0,"
                " updated_at = ?"
                " WHERE id = ? AND stale = 1 AND user_id = ?",  # sealed with that user's key
                (digest.user_id, text, tokens, now, digest.id, digest.user_id),
            )
            if cur.rowcount:
                n = len(sources)
                _updated(conn, digest.user_id, digest.id, digest.level, n, now, "rebuilt")
            return bool(cur.rowcount)

        return await self._db.write(write)

    async def drop_empty(self, digest: Digest, *, now: float) -> bool:
        """Delete a stale digest with no sources left; its parent (stale too) is rebuilt."""

        def write(conn: sqlite3.Connection) -> bool:
            if children(conn, digest.id):
                return False
            cur = conn.execute("DELETE FROM digests WHERE id = ? AND stale = 1", (digest.id,))
            if cur.rowcount:
                _updated(conn, digest.user_id, digest.id, digest.level, 0, now, "deleted")
            return bool(cur.rowcount)

        return await self._db.write(write)


def _updated(
    conn: sqlite3.Connection,
    user_id: str,
    digest_id: int,
    level: int,
    sources: int,
    now: float,
    how: str,
) -> None:
    record_event(
        conn,
        "digest.updated",
        now,
        user_id=user_id,
        payload={"digest_id": digest_id, "level": level, "sources": sources, "change": how},
    )
