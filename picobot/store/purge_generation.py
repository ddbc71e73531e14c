"""The purge generation: a counter every deletion of user data moves, in the store.

Several processes may share one store (two servers, a server and ``picobot purge``);
each keeps some user text in memory (prompt epochs, memory lists, a local model's
evaluated prompts). A purge, a retention sweep or a storage cap that deleted something
moves the counter (:func:`advance`) once its deletions are committed; every process
polls it (:func:`current`, one primary-key row, every half second: see
:class:`picobot.tasks.purge_watch.PurgeWatch`) and, when it moved, drops what it keeps
of data that is gone.

The counter says that something was deleted, not whose: naming the purged user in a
new row would write their id back into the store the purge just erased it from. Each
process finds what to drop by checking what it keeps against the store.

It is the ``purge_generation`` row of ``store_meta`` (a fact about the database, no user
content). The statements are plain SQL both backends run; a PostgreSQL store can add a
``NOTIFY`` to :func:`advance` so processes need not wait for their next poll.
"""

from __future__ import annotations

import logging
import sqlite3

from picobot.store.db import Database

log = logging.getLogger(__name__)

NAME = "purge_generation"
"""The ``store_meta`` row that holds the counter."""

_ADVANCE = (
    "INSERT INTO store_meta (name, value) VALUES (?, '1') ON CONFLICT (name) DO UPDATE"
    " SET value = CAST(CAST(store_meta.value AS INTEGER) + 1 AS TEXT) RETURNING value"
)


def advance_in(conn: sqlite3.Connection) -> int:
    """Move the counter inside the caller's write transaction; its new value."""
    row = conn.execute(_ADVANCE, (NAME,)).fetchone()
    return int(row[0])


async def advance(db: Database) -> int:
    """Move the counter (committed when this returns); its new value.

    Called after a deletion of user data committed, so a process that sees the new
    value finds the data gone when it checks what it keeps.
    """
    return await db.write(advance_in)


async def advance_after_failure(db: Database) -> None:
    """Move the counter after a deletion that failed part way (some rows may be gone);
    a failure here is logged, not raised: the deletion's own error is what its caller
    needs (the store failing is the likely cause of both), and the next deletion moves
    the counter again."""
    try:
        await advance(db)
    except Exception:
        log.exception("could not tell the other processes about a deletion that failed")


def current_in(conn: sqlite3.Connection) -> int:
    """The counter as the caller's snapshot holds it (0: nothing was ever purged)."""
    row = conn.execute("SELECT value FROM store_meta WHERE name = ?", (NAME,)).fetchone()
    return int(row[0]) if row is not None else 0


async def current(db: Database) -> int:
    """The counter as last committed (0: nothing was ever purged)."""
    return await db.read(current_in)
