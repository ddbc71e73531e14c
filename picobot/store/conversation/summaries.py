"""Session summaries: one rolling summary per session and the history it covers.

A summary covers the session's messages up to ``covered_seq``; everything after it is
"unsummarized". Messages themselves are never touched here: summarization only adds
or replaces the summary row.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from picobot.store.conversation.events import record_event_in
from picobot.store.conversation.messages import StoredMessage
from picobot.store.db import Database, Row


@dataclass(frozen=True, slots=True)
class Summary:
    """The stored summary of a session's messages with ``seq_order <= covered_seq``."""

    session_id: str
    summary: str
    covered_seq: int
    token_estimate: int
    updated_at: float


def _summary(row: Row) -> Summary:
    return Summary(
        session_id=str(row["session_id"]),
        summary=str(row["summary"]),
        covered_seq=int(row["covered_seq"]),
        token_estimate=int(row["token_estimate"]),
        updated_at=float(row["updated_at"]),
    )


def _message(row: Row) -> StoredMessage:
    return StoredMessage(
        id=int(row["id"]),
        session_id=str(row["session_id"]),
        seq_order=int(row["seq_order"]),
        role=str(row["role"]),
        content=str(row["content"]),
        token_estimate=int(row["token_estimate"]),
        created_at=float(row["created_at"]),
    )


def get_summary(conn: sqlite3.Connection, session_id: str) -> Summary | None:
    """The session's summary, or None (in a reader thread)."""
    row = conn.execute(
        "SELECT session_id, picobot_open(summary) AS summary, covered_seq, token_estimate,"
        " updated_at FROM session_summaries WHERE session_id = ?",
        (session_id,),
    ).fetchone()
    return _summary(row) if row else None


class SummaryRepo:
    """Read and write session summaries, and measure what they do not cover yet."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def get(self, session_id: str) -> Summary | None:
        """The session's summary, or None when it has none yet."""
        return await self._db.read(lambda conn: get_summary(conn, session_id))

    async def save(
        self,
        session_id: str,
        summary: str,
        covered_seq: int,
        token_estimate: int,
        now: float,
        *,
        replaces: int | None = None,
        actor: str | None = None,
        folded: Sequence[int] = (),
    ) -> bool:
        """Insert or replace the session's summary; return whether it was written.

        Nothing is written when the session or its message ``covered_seq`` no longer
        exists: a purge that ran while the model was summarizing must not be undone
        by a summary of the data it deleted. With ``replaces``, the ``covered_seq`` of
        the summary this one was built on (0: none), nothing is written either if the
        stored summary is another by now: another process folded further meanwhile,
        and writing would roll its summary back. With ``folded``, the ids of the messages
        newly folded into it, nothing is written when one of them is gone (a storage cap or
        ``/delete`` took it while the model summarized).

        The summary is model output: it is redacted (:attr:`Database.redact`) first. A
        written summary records ``summary.updated`` (how far it covers) in the same write.
        """
        summary = self._db.redact(summary)
        check = -1 if replaces is None else replaces
        async with self._db.transaction() as conn:
            async with conn.execute(
                "SELECT user_id FROM sessions WHERE id = ?", (session_id,)
            ) as owner:
                row = await owner.fetchone()
            if row is None:  # purged meanwhile: its messages are gone too
                return False
            user_id = str(row[0])
            cur = await conn.execute(
                "INSERT INTO session_summaries"
                " (session_id, summary, covered_seq, token_estimate, updated_at)"
                " SELECT ?1, picobot_seal(?6, ?2),"
                " ?3, ?4, ?5 WHERE EXISTS (SELECT 1 FROM messages"
                " WHERE session_id = ? AND seq_order = ?) AND (? < 0 OR COALESCE("
                "(SELECT covered_seq FROM session_summaries WHERE session_id = ?), 0) = ?)"
                " AND (SELECT COUNT(*) FROM messages WHERE id IN (SELECT value FROM"
                " json_each(?))) = ?"
                " ON CONFLICT (session_id) DO UPDATE SET summary = excluded.summary,"
                " covered_seq = excluded.covered_seq,"
                " token_estimate = excluded.token_estimate,"
                " updated_at = excluded.updated_at",
                (
                    *(session_id, summary, covered_seq, token_estimate, now, user_id),
                    *(session_id, covered_seq, check, session_id, check),
                    *(json.dumps(list(folded)), len(folded)),
                ),
            )
            written = cur.rowcount > 0
            await cur.close()
            if written:
                await record_event_in(
                    conn,
                    "summary.updated",
                    now,
                    user_id=user_id,
                    session_id=session_id,
                    actor=actor,
                    payload={"covered_seq": covered_seq, "token_estimate": token_estimate},
                )
        return written

    async def unsummarized_tokens(self, session_id: str) -> int:
        """Estimated tokens of the messages after the summary (all of them if none)."""
        row = await self._db.fetchone(
            "SELECT COALESCE(SUM(m.token_estimate), 0) FROM messages m"
            " WHERE m.session_id = ? AND m.seq_order > COALESCE("
            "(SELECT s.covered_seq FROM session_summaries s WHERE s.session_id = ?), 0)",
            (session_id, session_id),
        )
        return int(row[0]) if row else 0

    async def last_seq(self, session_id: str) -> int:
        """The ``seq_order`` of the session's newest message, 0 when it has none."""
        row = await self._db.fetchone(
            "SELECT COALESCE(MAX(seq_order), 0) FROM messages WHERE session_id = ?",
            (session_id,),
        )
        return int(row[0]) if row else 0

    async def sessions_over(
        self, threshold_tokens: int, limit: int, *, keep_recent: int = 0
    ) -> list[str]:
        """Sessions whose unsummarized tokens exceed ``threshold_tokens``, largest first.

        With ``keep_recent``, sessions with no more than that many unsummarized
        messages are left out: there is nothing to fold in them, and listing them
        would let them crowd out sessions that need work.
        """
        rows = await self._db.fetchall(
            "SELECT m.session_id FROM messages m"
            " LEFT JOIN session_summaries s ON s.session_id = m.session_id"
            " WHERE m.seq_order > COALESCE(s.covered_seq, 0)"
            " GROUP BY m.session_id HAVING SUM(m.token_estimate) > ? AND COUNT(*) > ?"
            " ORDER BY SUM(m.token_estimate) DESC, m.session_id LIMIT ?",
            (threshold_tokens, keep_recent, limit),
        )
        return [str(r[0]) for r in rows]

    async def messages_between(
        self,
        session_id: str,
        after_seq: int,
        upto_seq: int,
        *,
        max_tokens: int | None = None,
        per_message_tokens: int = 0,
        max_messages: int = 1000,
    ) -> list[StoredMessage]:
        """Messages with ``after_seq < seq_order <= upto_seq``, oldest first.

        With ``max_tokens``, only the oldest run whose costs sum to at most
        ``max_tokens`` is returned, but always at least the first message, so a caller
        folding in chunks always makes progress. A message costs its estimate plus
        ``per_message_tokens`` (what the caller adds around each, such as a header).
        ``max_messages`` caps the rows read.
        """
        budget = -1 if max_tokens is None else max(1, max_tokens)
        extra = max(0, per_message_tokens)
        # The running sum spans at most max_messages rows (inner LIMIT), and only rows
        # that start inside the budget are returned, so a huge backlog is never read
        # whole. Costs are never negative, so the kept rows are a contiguous prefix.
        rows = await self._db.fetchall(
            "SELECT id, session_id, seq_order, role, picobot_open(content) AS content,"
            " token_estimate, created_at"
            " FROM (SELECT *, SUM(token_estimate + ?) OVER (ORDER BY seq_order) AS running"
            " FROM (SELECT * FROM messages WHERE session_id = ? AND seq_order > ?"
            " AND seq_order <= ? ORDER BY seq_order LIMIT ?))"
            " WHERE ? < 0 OR running - token_estimate - ? < ? ORDER BY seq_order",
            (extra, session_id, after_seq, upto_seq, max_messages, budget, extra, budget),
        )
        messages = [_message(r) for r in rows]
        used = sum(m.token_estimate + extra for m in messages)
        if budget >= 0 and len(messages) > 1 and used > budget:
            # The last row started inside the budget but overflows it; the first row
            # stays even when it alone is too big, so callers always make progress.
            messages.pop()
        return messages
