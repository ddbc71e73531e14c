"""The webhook inbox and the outbound reply queue (tables of migration m004).

The inbox makes acknowledging a webhook safe: a message is committed here before the
platform hears 200, and ``UNIQUE(platform, message_id)`` turns a redelivery into a
no-op, also after a restart. The outbound queue makes replying safe: the replies of
one processed message are enqueued in the same transaction that marks it done, so a
crash can neither lose a reply nor enqueue it twice; each reply then stays queued
until the platform API took it or the attempts ran out.

Replies of one chat go out in queue order: only the oldest pending reply of a chat
(its "head") is ever due, so a reply waiting for a retry holds back the later ones.

Text is kept only while it is needed: a processed inbox row and a sent reply have
their text blanked (the conversation itself lives in ``messages``); what remains is
ids and timestamps for de-duplication and metrics. While it is kept, a text (a
document's caption too) is sealed with its user's key (``picobot_seal``, see
:mod:`picobot.store.keys.sealing`), so purging the user makes it unreadable at once.
A user purge deletes a user's rows by their ``user_id``, a session purge those of its
messages.

A reply to a message that was purged while its turn ran (the answer to ``/purge
user``'s "y" above all) is the exception: it is queued without its user id
(:data:`PURGED_USER`), so nothing names the purged user beyond what sending it needs
(the chat and the text), and :meth:`WebhookStore.delete_reply` deletes it once it is
sent or given up on (:mod:`picobot.privacy.purged_replies` then erases its bytes).

Several instances may share the store: a message's turn and a reply's sending are
each claimed by one instance (``claimed_by``, ``claim_until``: migration m027), in the
same statement that finds them pending, and the claim is renewed while the work goes
on. Another instance skips claimed rows, and takes them over once a claim expires (its
instance died). A chat's messages and replies still go in order: only the oldest
pending one of a chat can be claimed.

A reply may hand over a file (``/export`` on a messaging platform): its ``document``
names a user's export file under ``<data dir>/exports`` (never its content), and its
text is the caption. The delivery worker deletes the file once the reply is sent or
given up on (the column is cleared then); deleting the row (a purge, retention) deletes
the file too.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal

from picobot.store.channels.channel_state import save_offset
from picobot.store.channels.webhook_purge import WebhookPurges
from picobot.store.channels.webhook_rows import (
    INBOX_COLUMNS,
    OUTBOUND_COLUMNS,
    PURGED_USER,
    InboundMessage,
    InboxItem,
    OutboundItem,
    QueuedDocument,
    inbox_item,
    outbound_item,
)
from picobot.store.channels.webhook_seen import mark_seen, plain_key
from picobot.store.db import Database
from picobot.store.instance import new_instance_id

__all__ = [
    "PURGED_USER",
    "InboundMessage",
    "InboxItem",
    "OutboundItem",
    "QueuedDocument",
    "WebhookStore",
]

_MAX_ERROR = 300


# The oldest pending reply of each chat; later replies of a chat wait behind it.
_HEADS = f"""
    SELECT {OUTBOUND_COLUMNS} FROM outbound_queue o
    WHERE o.status = 'pending' {{extra}}
      AND NOT EXISTS (
        SELECT 1 FROM outbound_queue e
        WHERE e.status = 'pending' AND e.platform = o.platform
          AND e.chat_id = o.chat_id AND e.id < o.id)
    ORDER BY o.next_attempt_at, o.id
    LIMIT ?
"""  # noqa: S608 - constant column list


_CLAIM_DUE = f"""
    UPDATE outbound_queue SET claimed_by = ?, claim_until = ?
    WHERE id = ? AND status = 'pending' AND next_attempt_at <= ?
      AND (claim_until <= ? OR claimed_by = ?)
    RETURNING {OUTBOUND_COLUMNS}
"""  # noqa: S608 - constant column list
_PENDING_INBOX = f"""
    SELECT {INBOX_COLUMNS} FROM webhook_inbox
    WHERE status = 'pending' AND id > ? AND platform IN ({{marks}})
      AND (claim_until <= ? OR claimed_by = ?)
    ORDER BY id LIMIT ?
"""  # noqa: S608 - constant column list
_BY_PLATFORM = (
    "SELECT platform, COUNT(*) AS n FROM {table} WHERE status = 'pending' GROUP BY platform"
)
_PENDING_MESSAGES_BY_PLATFORM = _BY_PLATFORM.format(table="webhook_inbox")
_PENDING_REPLIES_BY_PLATFORM = _BY_PLATFORM.format(table="outbound_queue")


CLAIM_SECS = 15.0
"""How long a claim on an inbox message or a reply lasts unrenewed: a dead instance's
rows are taken over by another this long after its last renewal."""
ClaimedTable = Literal["webhook_inbox", "outbound_queue"]


def _names(platforms: Collection[str]) -> tuple[list[str], str]:
    """The platform names in a stable order, and the ``?`` marks of an IN list for them."""
    names = sorted(platforms)
    return names, ", ".join("?" * len(names))


class WebhookStore(WebhookPurges):
    """Repository of ``webhook_inbox`` and ``outbound_queue`` (scope deletes:
    :class:`WebhookPurges`)."""

    def __init__(
        self,
        db: Database,
        *,
        clock: Callable[[], float] = time.time,
        holder: str | None = None,
    ) -> None:
        self._db = db
        self._clock = clock
        self.holder = holder if holder is not None else new_instance_id()
        """This instance's id in the claims it takes."""

    @property
    def db(self) -> Database:
        """The database the rows live in (what erasing a deleted reply works on)."""
        return self._db

    async def accept(
        self, platform: str, msg: InboundMessage, *, seen_key: bytes | None = None
    ) -> int | None:
        """Record an inbound message; its inbox id, or None if it was seen before.

        ``seen_key`` is the message's replay-guard key (:mod:`picobot.store.channels.webhook_seen`;
        unkeyed when not given): a message whose key was ever recorded is a duplicate,
        also after its inbox row was purged. The text is redacted, then sealed with the
        user's key, before it is stored.
        """
        key = seen_key if seen_key is not None else plain_key(platform, msg.message_id)
        return (await self.accept_many(platform, [(msg, key)]))[0]

    async def accept_many(
        self,
        platform: str,
        messages: Sequence[tuple[InboundMessage, bytes]],
        *,
        next_offset: int | None = None,
    ) -> list[int | None]:
        """Record messages (each with its replay-guard key) as :meth:`accept` does, in one
        transaction; the inbox id of each, or None for one seen before.

        With ``next_offset``, the platform's offset (:mod:`picobot.store.channels.channel_state`)
        is saved in the same transaction: the offset moves past these messages exactly
        when they are stored.
        """
        now = self._clock()
        rows = [
            (
                key,
                (
                    platform,
                    msg.message_id,
                    msg.user_id,
                    msg.chat_id,
                    self._db.redact(msg.text),
                    json.dumps(msg.reply_to, separators=(",", ":")),
                    now,
                ),
            )
            for msg, key in messages
        ]

        def insert(conn: sqlite3.Connection) -> list[int | None]:
            ids: list[int | None] = []
            for key, params in rows:
                if not mark_seen(conn, key, now):
                    ids.append(None)
                    continue
                cur = conn.execute(
                    "INSERT INTO webhook_inbox (platform, message_id, user_id, chat_id, text,"
                    " reply_to_json, received_at) VALUES (?1, ?2, ?3, ?4, picobot_seal(?3, ?5),"
                    " ?6, ?7)"
                    " ON CONFLICT (platform, message_id) DO NOTHING RETURNING id",
                    params,
                )
                row = cur.fetchone()
                ids.append(None if row is None else int(row[0]))
            if next_offset is not None:
                save_offset(conn, platform, next_offset, now)
            return ids

        # One trip to the writer, group-committed with concurrent webhooks and turns.
        return await self._db.write(insert)

    async def pending_inbox(
        self, limit: int, platforms: Collection[str], *, after_id: int = 0
    ) -> list[InboxItem]:
        """Unprocessed messages of ``platforms`` with an id above ``after_id``, oldest first.

        Messages of any other platform (one no longer enabled) stay pending but are
        left out, so a dispatcher never pages through them; so are those another
        instance has claimed (:meth:`start_processing`).
        """
        names, marks = _names(platforms)
        if not names:
            return []
        rows = await self._db.fetchall(
            _PENDING_INBOX.format(marks=marks),
            (after_id, *names, self._clock(), self.holder, limit),
        )
        return [inbox_item(r) for r in rows]

    async def start_processing(self, inbox_id: int) -> int | None:
        """Claim the message for this instance and count a processing attempt before the
        turn runs (the count survives a crash).

        Returns the attempt number, or None if the message is no longer pending (it
        was processed meanwhile, or purged: it must not run again), if another instance
        holds a live claim on it, or if an earlier message of its chat is still pending
        (a chat's turns run in order, whichever instance runs each). The claim lasts
        :data:`CLAIM_SECS`; :meth:`renew_claim` keeps a long turn's.
        """
        now = self._clock()

        def count_attempt(conn: sqlite3.Connection) -> int | None:
            cur = conn.execute(
                "UPDATE webhook_inbox SET attempts = attempts + 1, claimed_by = ?,"
                " claim_until = ? WHERE id = ? AND status = 'pending'"
                " AND (claim_until <= ? OR claimed_by = ?)"
                " AND NOT EXISTS (SELECT 1 FROM webhook_inbox e WHERE e.status = 'pending'"
                " AND e.platform = webhook_inbox.platform AND e.chat_id = webhook_inbox.chat_id"
                " AND e.id < webhook_inbox.id) RETURNING attempts",
                (self.holder, now + CLAIM_SECS, inbox_id, now, self.holder),
            )
            row = cur.fetchone()
            return int(row[0]) if row is not None else None

        return await self._db.write(count_attempt)

    async def mark_processed(
        self,
        inbox_id: int,
        replies: Sequence[str | QueuedDocument],
        *,
        platform: str,
        reply_to: dict[str, Any],
        user_id: str,
        chat_id: str,
        session_id: str | None = None,
        failed: bool = False,
    ) -> int:
        """Mark the message done (or failed) and enqueue its replies, atomically.

        Returns how many replies were enqueued: none if the message was processed
        already (a second run must not answer twice). A message purged while its turn
        ran still gets its replies (the answer to "/purge user" is one of them), queued
        without its user id (:data:`PURGED_USER`): its user's data is gone, and the
        reply is deleted once it is sent or given up on (:meth:`delete_reply`).
        ``session_id`` is the session the replies were produced in: purging it deletes
        them (a command's reply quotes the session without being a message of it).
        Texts and captions are redacted and sealed with the owner's key (the shared
        key for :data:`PURGED_USER`) before they are stored; a document's file name is
        stored as it is.
        """
        now = self._clock()
        target = json.dumps(reply_to, separators=(",", ":"))
        texts = [
            (self._db.redact(r), None)
            if isinstance(r, str)
            else (self._db.redact(r.caption), r.document)
            for r in replies
        ]

        def finish(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                "SELECT status FROM webhook_inbox WHERE id = ?", (inbox_id,)
            ).fetchone()
            if row is not None and row[0] != "pending":
                return 0
            if row is not None:
                conn.execute(
                    "UPDATE webhook_inbox SET status = ?, processed_at = ?, text = '',"
                    " session_id = ? WHERE id = ?",
                    ("failed" if failed else "done", now, session_id, inbox_id),
                )
            # Purged (by the turn itself, or meanwhile): the reply names no user.
            owner = user_id if row is not None else PURGED_USER
            conn.executemany(
                "INSERT INTO outbound_queue (platform, user_id, chat_id, reply_to_json,"
                " text, next_attempt_at, created_at, inbox_id, seq, session_id, document)"
                " VALUES (?1, ?2, ?3, ?4, picobot_seal(?2, ?5), ?6, ?7, ?8, ?9, ?10, ?11)",
                [
                    (
                        platform,
                        owner,
                        chat_id,
                        target,
                        text,
                        now,
                        now,
                        inbox_id if row is not None else None,
                        seq,
                        session_id,
                        document,
                    )
                    for seq, (text, document) in enumerate(texts)
                ],
            )
            return len(texts)

        return await self._db.write(finish)

    async def due_outbound(self, now: float, limit: int) -> list[OutboundItem]:
        """Replies to send now: the head of each chat's queue, if its time has come."""
        rows = await self._db.fetchall(
            _HEADS.format(extra="AND o.next_attempt_at <= ?"), (now, limit)
        )
        return [outbound_item(r) for r in rows]

    async def outbound_heads(self, limit: int, platforms: Collection[str]) -> list[OutboundItem]:
        """The head of each chat's pending replies of ``platforms``, soonest first (due or not).

        Replies of any other platform (one no longer enabled) stay queued but are left
        out here, so they can never take up the places of replies that can be sent; so
        are heads another instance has claimed (the chat's next reply waits behind them).
        """
        names, marks = _names(platforms)
        if not names:
            return []
        claims = "AND (o.claim_until <= ? OR o.claimed_by = ?)"
        rows = await self._db.fetchall(
            _HEADS.format(extra=f"AND o.platform IN ({marks}) {claims}"),
            (*names, self._clock(), self.holder, limit),
        )
        return [outbound_item(r) for r in rows]

    async def pending_replies_by_platform(self) -> dict[str, int]:
        """How many replies wait to be delivered, per platform."""
        return await self._pending_by_platform(_PENDING_REPLIES_BY_PLATFORM)

    async def pending_messages_by_platform(self) -> dict[str, int]:
        """How many accepted messages wait for their turn, per platform."""
        return await self._pending_by_platform(_PENDING_MESSAGES_BY_PLATFORM)

    async def _pending_by_platform(self, query: str) -> dict[str, int]:
        rows = await self._db.fetchall(query)
        return {str(r["platform"]): int(r["n"]) for r in rows}

    async def claim_due(self, outbound_id: int, now: float) -> OutboundItem | None:
        """Claim the reply for this instance if it is still pending, due and not claimed
        by another instance; the reply as stored now (else None).

        The claim lasts :data:`CLAIM_SECS` (:meth:`renew_claim` keeps a long upload's);
        marking the reply sent, failed or due again ends it.
        """
        row = await self._db.write(
            lambda conn: conn.execute(
                _CLAIM_DUE, (self.holder, now + CLAIM_SECS, outbound_id, now, now, self.holder)
            ).fetchone()
        )
        return None if row is None else outbound_item(row)

    async def renew_claim(self, table: ClaimedTable, row_id: int) -> bool:
        """Extend this instance's claim on a row by :data:`CLAIM_SECS`; whether it still
        holds it (False: the row is gone or done, or the claim expired and another
        instance took it)."""
        now = self._clock()
        sql = (
            f"UPDATE {table} SET claim_until = ? WHERE id = ? AND claimed_by = ?"  # noqa: S608
            " AND status = 'pending'"
        )
        args = (now + CLAIM_SECS, row_id, self.holder)
        changed = await self._db.write(lambda conn: conn.execute(sql, args).rowcount)
        return changed > 0

    async def mark_sent(self, outbound_id: int, now: float) -> None:
        """The platform took the reply; its text (and file name) is no longer needed."""
        await self._db.execute_write(
            "UPDATE outbound_queue SET status = 'sent', sent_at = ?, attempts = attempts + 1,"
            " text = '', document = NULL, last_error = NULL, claimed_by = NULL,"
            " claim_until = 0 WHERE id = ?",
            (now, outbound_id),
        )

    async def mark_retry(self, outbound_id: int, error: str, next_attempt_at: float) -> None:
        """Count a failed attempt and schedule the next one."""
        await self._db.execute_write(
            "UPDATE outbound_queue SET attempts = attempts + 1, last_error = ?,"
            " next_attempt_at = ?, claimed_by = NULL, claim_until = 0 WHERE id = ?",
            (error[:_MAX_ERROR], next_attempt_at, outbound_id),
        )

    async def delete_reply(self, outbound_id: int) -> None:
        """Delete one reply, whatever its state: a purged user's reply once it was sent
        or given up on (:data:`PURGED_USER`; its bytes are then erased by the caller)."""
        await self._db.execute_write("DELETE FROM outbound_queue WHERE id = ?", (outbound_id,))

    async def mark_failed(self, outbound_id: int, error: str) -> None:
        """Give up on a reply (attempts exhausted or a permanent error).

        The text is kept for the operator until retention or a purge removes it; a
        document's name goes (the worker deletes the file).
        """
        await self._db.execute_write(
            "UPDATE outbound_queue SET status = 'failed', attempts = attempts + 1,"
            " document = NULL, last_error = ?, claimed_by = NULL, claim_until = 0 WHERE id = ?",
            (error[:_MAX_ERROR], outbound_id),
        )

    async def queue_depth(self) -> int:
        """Replies waiting to be delivered."""
        row = await self._db.fetchone(
            "SELECT COUNT(*) AS n FROM outbound_queue WHERE status = 'pending'"
        )
        return int(row["n"]) if row else 0

    async def inbox_depth(self) -> int:
        """Accepted messages not processed yet."""
        row = await self._db.fetchone(
            "SELECT COUNT(*) AS n FROM webhook_inbox WHERE status = 'pending'"
        )
        return int(row["n"]) if row else 0
