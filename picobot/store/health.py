"""Whether the store can take writes now: the readiness probe's question.

A database that answers ``SELECT 1`` may still refuse every write (locked by another
process, read-only, disk full), so readiness commits a real write: ``PRAGMA
user_version`` set to the value it already has changes nothing, yet takes the write
lock and appends a page to the WAL like any commit (on PostgreSQL: a transaction id,
committed under the writer lock). It is bounded by a timeout, and
the free space of the data directory's disk is checked too, because a commit that
reuses WAL space can succeed on a full disk that the next larger write fails on.
The schema is compared with this PicoBot's migrations as well: an instance whose file
another, newer instance has migrated (a rolling upgrade) must stop taking traffic.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from dataclasses import dataclass
from typing import Literal

from picobot.errors import StoreUnavailable
from picobot.store.db import Database
from picobot.store.migrations import schema_state

Migrations = Literal["ok", "pending", "newer", "unknown"]
"""The file's migrations against this PicoBot's: the same, some not applied yet, some this
PicoBot does not know (a newer one applied them), or unread."""

WRITE_PROBE_TIMEOUT_SECS = 2.0
"""Longest wait for the probe's commit; a store slower than this is not ready."""


@dataclass(frozen=True, slots=True)
class WriteProbe:
    """The probe's findings: ``problem`` (for the log) is None when the store can write."""

    database_ok: bool
    disk_ok: bool
    problem: str | None
    migrations: Migrations = "ok"

    @property
    def ready(self) -> bool:
        """True when writes are expected to succeed."""
        return self.problem is None


def _rewrite_user_version(conn: sqlite3.Connection) -> None:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    conn.execute(f"PRAGMA user_version = {int(version)}")


def _commit_a_transaction_id(conn: sqlite3.Connection) -> None:
    """PostgreSQL's write that changes nothing: a transaction id, whose commit is
    written to the WAL like any other (and the writer lock taken first)."""
    conn.execute("SELECT txid_current()").fetchone()


async def probe_writable(
    db: Database, *, min_free_bytes: int, timeout_secs: float = WRITE_PROBE_TIMEOUT_SECS
) -> WriteProbe:
    """Commit a write that changes nothing, compare the schema with the known migrations
    and check free disk space; never raises for an unusable store (the reason is in
    ``problem``, for the log, not for clients)."""
    database_ok, disk_ok, problems = True, True, []
    migrations: Migrations = "unknown"
    try:
        async with asyncio.timeout(timeout_secs):
            await db.write(_rewrite_user_version if db.engine.file else _commit_a_transaction_id)
            state = await schema_state(db)
    except TimeoutError:
        database_ok = False
        problems.append(f"a write did not commit within {timeout_secs:g}s (database locked?)")
    except StoreUnavailable as exc:
        database_ok = False
        problems.append(str(exc))
    else:
        migrations = "newer" if state.ahead else "pending" if state.behind else "ok"
        if migrations != "ok":
            problems.append(
                f"the database's schema version is {state.current}, this PicoBot's is "
                f"{state.known}"
                + (" (a newer PicoBot migrated it)" if state.ahead else " (migrations pending)")
            )
    try:
        free = shutil.disk_usage(db.path.parent).free
    except OSError as exc:
        disk_ok = False
        problems.append(f"cannot read the free space of {db.path.parent}: {exc.strerror}")
    else:
        if free < min_free_bytes:
            disk_ok = False
            problems.append(f"{free} bytes free on the data directory's disk")
    return WriteProbe(database_ok, disk_ok, "; ".join(problems) or None, migrations)
