"""Migrations of the webhook inbox, the reply queue and the replay guard.

Kept apart from :mod:`picobot.store.migrations`, which lists them in order; see there
for the rules (never edit a released migration).
"""

from __future__ import annotations

from picobot.store.connection import AsyncConnection
from picobot.store.migrations.script import run_script


async def m004_webhook_queues(conn: AsyncConnection) -> None:
    """The durable webhook inbox and the outbound reply queue.

    ``webhook_inbox`` records every accepted platform message before the webhook is
    acknowledged; ``UNIQUE(platform, message_id)`` turns a platform's redelivery into a
    no-op, across restarts. ``outbound_queue`` holds replies until the platform API
    took them, with attempts and the time of the next try; ``seq`` orders the replies
    of one inbox message. Both carry ``user_id`` so a user purge can delete them; their
    text is blanked once it is no longer needed (processed, sent). See
    picobot.store.channels.webhooks.
    """
    await run_script(
        conn,
        """
        CREATE TABLE webhook_inbox (
            id INTEGER PRIMARY KEY,
            platform TEXT NOT NULL,
            message_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            text TEXT NOT NULL,
            reply_to_json TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'done', 'failed')),
            attempts INTEGER NOT NULL DEFAULT 0,
            received_at REAL NOT NULL,
            processed_at REAL,
            UNIQUE (platform, message_id)
        );
        CREATE INDEX webhook_inbox_pending ON webhook_inbox(id) WHERE status = 'pending';
        CREATE INDEX webhook_inbox_by_user ON webhook_inbox(user_id);
        CREATE INDEX webhook_inbox_by_age ON webhook_inbox(received_at);

        CREATE TABLE outbound_queue (
            id INTEGER PRIMARY KEY,
            platform TEXT NOT NULL,
            user_id TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            reply_to_json TEXT NOT NULL,
            text TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'sent', 'failed')),
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL NOT NULL,
            last_error TEXT,
            created_at REAL NOT NULL,
            sent_at REAL,
            inbox_id INTEGER REFERENCES webhook_inbox(id) ON DELETE SET NULL,
            seq INTEGER NOT NULL DEFAULT 0
        );
        -- Due items, and the head of each chat's pending replies (sent in id order).
        CREATE INDEX outbound_due ON outbound_queue(next_attempt_at) WHERE status = 'pending';
        CREATE INDEX outbound_by_chat ON outbound_queue(platform, chat_id, id)
            WHERE status = 'pending';
        CREATE INDEX outbound_by_user ON outbound_queue(user_id);
        CREATE INDEX outbound_by_inbox ON outbound_queue(inbox_id);
        CREATE INDEX outbound_by_age ON outbound_queue(created_at);
        """,
    )


async def m013_webhook_replay_guard(conn: AsyncConnection) -> None:
    """Content-free de-duplication records, and replies linked to their session.

    ``webhook_seen`` keeps, for every accepted platform message, a keyed hash of its
    platform and message id and the time it was seen: no text, no user id. Purges
    leave it alone (a replayed message must stay a duplicate after its user was
    purged); retention prunes it once no platform can deliver the message again. See
    picobot.store.channels.webhook_seen.

    ``outbound_queue.session_id`` and ``webhook_inbox.session_id`` are the session a
    reply was produced in and a message was processed in, so a session purge deletes
    command replies too (they quote the session but are no message of it), and the
    rows of commands. Existing rows get it through their message where it is found.
    """
    await run_script(
        conn,
        """
        CREATE TABLE webhook_seen (
            key BLOB PRIMARY KEY,
            seen_at REAL NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX webhook_seen_by_age ON webhook_seen(seen_at);

        ALTER TABLE outbound_queue ADD COLUMN session_id TEXT;
        UPDATE outbound_queue SET session_id = (
            SELECT m.session_id FROM webhook_inbox i JOIN messages m
              ON m.source_id = i.platform || ':' || i.message_id
            WHERE i.id = outbound_queue.inbox_id LIMIT 1)
        WHERE inbox_id IS NOT NULL;
        CREATE INDEX outbound_by_session ON outbound_queue(session_id)
            WHERE session_id IS NOT NULL;

        ALTER TABLE webhook_inbox ADD COLUMN session_id TEXT;
        UPDATE webhook_inbox SET session_id = (
            SELECT m.session_id FROM messages m
            WHERE m.source_id = webhook_inbox.platform || ':' || webhook_inbox.message_id
            LIMIT 1);
        CREATE INDEX webhook_inbox_by_session ON webhook_inbox(session_id)
            WHERE session_id IS NOT NULL;
        """,
    )


async def m021_outbound_documents(conn: AsyncConnection) -> None:
    """Replies that hand over a file: ``outbound_queue.document``.

    The name (never the content, nor a path) of a user's export file under
    ``<data dir>/exports`` (``/export`` on a messaging platform), sent through the
    platform's file API with the reply's text as its caption. The file is deleted once
    the reply is sent or given up on, and with the row (purges, retention); the column
    is cleared then. See picobot.store.channels.webhooks.
    """
    await run_script(conn, "ALTER TABLE outbound_queue ADD COLUMN document TEXT;")
