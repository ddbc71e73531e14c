"""The migration of what instances sharing one store coordinate through; see
picobot.store.leases."""

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
