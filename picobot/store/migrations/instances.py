"""The migrations of what instances sharing one store coordinate through; see
picobot.store.leases and picobot.store.channels.webhooks."""

from __future__ import annotations

from picobot.store.connection import AsyncConnection
from picobot.store.migrations.script import run_script


async def m026_leases(conn: AsyncConnection) -> None:
    """``leases``: which instance runs each cluster-wide background job, until when.

    Names are job names, holders random per-process ids: no user content.
    """
    await run_script(
        conn,
        """
        CREATE TABLE leases (
            name TEXT PRIMARY KEY,
            holder TEXT NOT NULL,
            expires_at REAL NOT NULL
        );
        """,
    )


async def m027_queue_claims(conn: AsyncConnection) -> None:
    """Claims on the webhook inbox and the reply queue: which instance is running a
    message's turn or sending a reply (``claimed_by``, an instance id) and until when
    (``claim_until``; 0: unclaimed), so instances sharing the store never take the same
    row, and a dead instance's rows are taken over once its claims expire. No content.
    """
    await run_script(
        conn,
        """
        ALTER TABLE webhook_inbox ADD COLUMN claimed_by TEXT;
        ALTER TABLE webhook_inbox ADD COLUMN claim_until REAL NOT NULL DEFAULT 0;
        ALTER TABLE outbound_queue ADD COLUMN claimed_by TEXT;
        ALTER TABLE outbound_queue ADD COLUMN claim_until REAL NOT NULL DEFAULT 0;
        """,
    )


async def m028_pending_purges(conn: AsyncConnection) -> None:
    """``pending_purges``: purges planned and waiting for their y/n answer, shared by
    every instance, so a confirmation is answered wherever it arrives.

    Keyed by the SHA-256 of the confirmation token, never the token. A row holds the
    asking actor's id, the chat it was asked from, and the plan: scope ids, counts and
    a cutoff, no content.
    """
    await run_script(
        conn,
        """
        CREATE TABLE pending_purges (
            token_hash TEXT PRIMARY KEY,
            actor_id TEXT NOT NULL,
            operator INTEGER NOT NULL,
            channel TEXT,
            chat_id TEXT,
            user_id TEXT,
            plan TEXT NOT NULL,
            expires_at REAL NOT NULL
        );
        CREATE INDEX pending_purges_actor ON pending_purges (actor_id);
        CREATE INDEX pending_purges_user ON pending_purges (user_id);
        """,
    )
