"""Deleting webhook rows by scope (a user, a session, an age), with the files they name.

Part of :class:`picobot.store.channels.webhooks.WebhookStore`: the inbox and reply rows
a purge or retention removes, counted exactly as they are deleted. A deleted reply that
was to hand over an export file (``outbound_queue.document``) takes the file with it.
"""

from __future__ import annotations

from picobot.store.db import Database
from picobot.store.erasure.export_files import delete_export_file

# The inbox rows of one session's messages: a webhook message's ``source_id`` is
# "<platform>:<message id>" (m007), which the inbox's UNIQUE (platform, message_id) finds.
_SESSION_INBOX_IDS = """
    SELECT i.id FROM messages m JOIN webhook_inbox i
      ON i.platform = substr(m.source_id, 1, instr(m.source_id, ':') - 1)
     AND i.message_id = substr(m.source_id, instr(m.source_id, ':') + 1)
    WHERE m.session_id = ? AND m.source_id IS NOT NULL
"""
_SESSION_IDS = _SESSION_INBOX_IDS.replace("?", "?1")
# A message processed in the session (m013; a command is no message of it), or one
# stored as a message of it.
_SESSION_INBOX = f"session_id = ?1 OR id IN ({_SESSION_IDS})"
# A reply produced in the session (m013), or one answering a message of it.
_OF_SESSION = f"session_id = ?1 OR inbox_id IN ({_SESSION_IDS})"


class WebhookPurges:
    """The scope deletes of the webhook inbox and reply queue (over ``self._db``)."""

    _db: Database

    async def count_user(self, user_id: str) -> int:
        """Inbox and queue rows of one user (what :meth:`delete_user` removes)."""
        return await self._count_where("user_id = ?1", "user_id = ?1", user_id)

    async def delete_user(self, user_id: str) -> int:
        """Delete every inbox and queue row of one user; return how many."""
        return await self._delete_where("user_id = ?1", "user_id = ?1", user_id)

    async def count_session(self, session_id: str) -> int:
        """Rows of one session (what :meth:`delete_session` removes)."""
        return await self._count_where(_OF_SESSION, _SESSION_INBOX, session_id)

    async def delete_session(self, session_id: str) -> int:
        """Delete the inbox rows of a session's messages and every reply produced in the
        session or answering one of its messages, sent, pending or given up on (a
        reply's text is the session's, a command's reply quotes it); return how many.

        Run before the session's messages are deleted: their ``source_id`` finds the rows.
        """
        return await self._delete_where(_OF_SESSION, _SESSION_INBOX, session_id)

    async def count_before(self, cutoff: float) -> int:
        """Rows :meth:`delete_before` would remove for the same cutoff."""
        return await self._count_where("created_at < ?1", "received_at < ?1", cutoff)

    async def delete_before(self, cutoff: float) -> int:
        """Delete rows older than ``cutoff``, finished or not.

        Pending ones too: a message or reply still pending after the retention period
        waits for a platform that is no longer enabled, and it holds text that
        retention has deleted everywhere else (the stored reply, say). A row the
        inbox worker is processing at that moment is handled as a purged one (see
        :meth:`mark_processed`). Removing old inbox rows also ends their
        de-duplication, which platforms only need for hours.
        """
        return await self._delete_where("created_at < ?1", "received_at < ?1", cutoff)

    # The clauses are constants of this module, their one parameter named ?1; only its
    # value comes from callers.
    async def _count_where(self, outbound: str, inbox: str, param: object) -> int:
        row = await self._db.fetchone(
            f"SELECT (SELECT COUNT(*) FROM outbound_queue WHERE {outbound})"  # noqa: S608
            f" + (SELECT COUNT(*) FROM webhook_inbox WHERE {inbox}) AS n",
            (param,),
        )
        return int(row["n"]) if row else 0

    async def _delete_where(self, outbound: str, inbox: str, param: object) -> int:
        """Delete the rows, then the export files the deleted replies were to hand over."""
        async with self._db.transaction() as conn:
            files = await conn.execute(
                f"SELECT document FROM outbound_queue WHERE ({outbound})"  # noqa: S608
                " AND document IS NOT NULL",
                (param,),
            )
            documents = [str(row[0]) for row in await files.fetchall()]
            a = await conn.execute(f"DELETE FROM outbound_queue WHERE {outbound}", (param,))  # noqa: S608
            b = await conn.execute(f"DELETE FROM webhook_inbox WHERE {inbox}", (param,))  # noqa: S608
            deleted = a.rowcount + b.rowcount
        for name in documents:
            delete_export_file(self._db.path.parent, name)
        return deleted
