"""Migration of the outbound channel connections' state: offsets and connection status.

Kept apart from :mod:`picobot.store.migrations`, which lists it in order; see there for
the rules (never edit a released migration).
"""

from __future__ import annotations

from picobot.store.connection import AsyncConnection
from picobot.store.migrations.script import run_script


async def m016_channel_offsets(conn: AsyncConnection) -> None:
    """Where each outbound connection stands: its offset and its connection status.

    ``channel_offsets`` holds, per channel that pulls its messages (Telegram long
    polling), the next update id to ask for, written in the transaction that stores
    the inbox rows of the updates it covers, so a crash neither loses nor repeats an
    update. ``channel_connections`` holds each outbound connection's last known state
    (connected, retrying, stopped), when it last received something and its error
    count, for ``picobot status``. Neither holds message content or user ids; see
    picobot.store.channels.channel_state.
    """
    await run_script(
        conn,
        """
        CREATE TABLE channel_offsets (
            channel TEXT PRIMARY KEY,
            next_offset INTEGER NOT NULL,
            updated_at REAL NOT NULL
        ) WITHOUT ROWID;

        CREATE TABLE channel_connections (
            channel TEXT PRIMARY KEY,
            mode TEXT NOT NULL,
            state TEXT NOT NULL,
            since REAL NOT NULL,
            last_update_at REAL,
            errors INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            updated_at REAL NOT NULL
        ) WITHOUT ROWID;
        """,
    )
