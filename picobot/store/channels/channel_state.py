"""Where each outbound connection stands (tables of migration m016).

A channel that pulls its messages instead of receiving webhooks (Telegram long
polling) keeps its offset here: the id of the next update to ask for. It is written
by :func:`save_offset` inside the write transaction that stores the inbox rows of the
updates it covers (:meth:`picobot.store.channels.webhooks.WebhookStore.accept_many`), so after
a crash the offset and the inbox agree: an update is either stored and confirmed, or
neither, and is then fetched again.

``channel_connections`` keeps each outbound connection's last known state for
``picobot status``, which runs in another process than the server.

Privacy: neither table holds message content or a user id (channel names, numbers,
times and an error text that names no secret and no user), so purges have nothing to
delete here, exports nothing to show, and there is one row per channel, overwritten,
for retention to bound.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass

from picobot.store.db import Database, Row

MAX_ERROR_CHARS = 300


@dataclass(frozen=True, slots=True)
class ConnectionRecord:
    """One outbound connection's state as last recorded by the server."""

    channel: str
    mode: str
    state: str
    """``connecting``, ``connected``, ``retrying`` (after an error) or ``stopped``."""
    since: float
    """When it entered ``state``."""
    last_update_at: float | None
    """When it last received something from the platform (a message or not)."""
    errors: int
    """Errors since the server started."""
    last_error: str | None
    updated_at: float


def save_offset(conn: sqlite3.Connection, channel: str, next_offset: int, now: float) -> None:
    """Record ``channel``'s next offset, in the caller's write transaction."""
    conn.execute(
        "INSERT INTO channel_offsets (channel, next_offset, updated_at) VALUES (?, ?, ?)"
        " ON CONFLICT (channel) DO UPDATE SET next_offset = excluded.next_offset,"
        " updated_at = excluded.updated_at",
        (channel, next_offset, now),
    )


class ChannelState:
    """Repository of ``channel_offsets`` and ``channel_connections``."""

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock

    async def offset(self, channel: str, *, max_age_secs: float) -> int | None:
        """The stored next offset of ``channel``, or None if none was stored or it was
        stored more than ``max_age_secs`` ago (a platform may have moved on since)."""
        row = await self._db.fetchone(
            "SELECT next_offset, updated_at FROM channel_offsets WHERE channel = ?", (channel,)
        )
        if row is None or self._clock() - float(row["updated_at"]) > max_age_secs:
            return None
        return int(row["next_offset"])

    async def record(self, record: ConnectionRecord) -> None:
        """Store ``record`` as the connection's current state."""
        await self._db.execute_write(
            "INSERT INTO channel_connections (channel, mode, state, since, last_update_at,"
            " errors, last_error, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (channel) DO UPDATE SET mode = excluded.mode,"
            " state = excluded.state, since = excluded.since,"
            " last_update_at = excluded.last_update_at, errors = excluded.errors,"
            " last_error = excluded.last_error, updated_at = excluded.updated_at",
            (
                record.channel,
                record.mode,
                record.state,
                record.since,
                record.last_update_at,
                record.errors,
                None if record.last_error is None else record.last_error[:MAX_ERROR_CHARS],
                record.updated_at,
            ),
        )

    async def connections(self) -> list[ConnectionRecord]:
        """Every recorded connection, by channel name."""
        rows = await self._db.fetchall("SELECT * FROM channel_connections ORDER BY channel")
        return [_record(r) for r in rows]


def _record(row: Row) -> ConnectionRecord:
    return ConnectionRecord(
        channel=str(row["channel"]),
        mode=str(row["mode"]),
        state=str(row["state"]),
        since=float(row["since"]),
        last_update_at=None if row["last_update_at"] is None else float(row["last_update_at"]),
        errors=int(row["errors"]),
        last_error=None if row["last_error"] is None else str(row["last_error"]),
        updated_at=float(row["updated_at"]),
    )
