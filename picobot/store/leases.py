"""The ``leases`` table: which instance runs each cluster-wide background job.

Several ``picobot serve`` processes may share one store. Jobs that act on the whole
store (retention, summaries, learning, indexing) must run on one of them at a time, and
on another when that one dies. A lease names its job, its holder (an instance id,
:func:`picobot.store.instance.new_instance_id`) and when it expires; the holder renews it
well before then, so a killed holder loses it within one lease time. Each statement
is a single portable ``INSERT ... ON CONFLICT`` or ``DELETE`` (a PostgreSQL store runs
them as they are). Rows hold job names and instance ids, never user content, so purges,
retention and export have nothing to do with this table.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from picobot.store.db import Database

_TAKE = (
    "INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?)"
    " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder,"
    " expires_at = excluded.expires_at"
    " WHERE leases.holder = excluded.holder OR leases.expires_at <= ?"
    " RETURNING holder"
)


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease as stored."""

    name: str
    holder: str
    expires_at: float


def take_in(conn: sqlite3.Connection, name: str, holder: str, until: float, now: float) -> bool:
    """Take or renew ``name`` for ``holder`` until ``until``, inside the caller's write;
    whether ``holder`` has it now (False: another holder's lease has not expired)."""
    return conn.execute(_TAKE, (name, holder, until, now)).fetchone() is not None


async def take(db: Database, names: list[str], holder: str, until: float, now: float) -> set[str]:
    """Take or renew each of ``names`` for ``holder`` in one commit; the names it holds."""

    def run(conn: sqlite3.Connection) -> set[str]:
        return {name for name in names if take_in(conn, name, holder, until, now)}

    return await db.write(run)


async def release(db: Database, names: list[str], holder: str) -> None:
    """Give up ``holder``'s leases of ``names`` (another instance may take them at once)."""

    def run(conn: sqlite3.Connection) -> None:
        conn.executemany(
            "DELETE FROM leases WHERE name = ? AND holder = ?", [(n, holder) for n in names]
        )

    await db.write(run)


async def leases(db: Database) -> list[Lease]:
    """Every lease, expired ones included, by name."""
    rows = await db.fetchall("SELECT name, holder, expires_at FROM leases ORDER BY name")
    return [Lease(str(r["name"]), str(r["holder"]), float(r["expires_at"])) for r in rows]
