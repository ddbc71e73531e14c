"""Making deleted text unrecoverable from the database's files: SQLite's file, its WAL and
the index; on PostgreSQL, the purged users' keys.

A purge or retention sweep (:mod:`picobot.store.erasure.purge`) deletes rows; this erases what
deleting leaves behind.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from picobot.store.db import Database
from picobot.store.retrieval.search import SearchIndex


async def erase_residue(
    db: Database,
    *,
    vacuum: bool = True,
    timings: dict[str, float] | None = None,
) -> None:
    """Make deleted text unrecoverable from every file of the database.

    Call after a purge or retention sweep, outside any transaction. Each place that
    keeps deleted text after its rows are gone has its remedy:

    - The FTS5 index: SQLite 3.40 has no FTS5 ``secure-delete``; a delete appends a
      segment repeating the row's terms, and older segments still hold them. The index
      is merged into one segment without them, in steps (:meth:`SearchIndex.optimize`).
    - Freed cells and pages: every connection runs with ``PRAGMA secure_delete=ON``
      (see :mod:`picobot.store.db`), which zeroes them as rows are deleted.
    - Stale copies in live pages: when a b-tree rebalances, cells moved to another
      page are not wiped from the unused space of the page they left, and a later
      delete zeroes only the live copy (measured on FTS5 segment pages; see
      tests/privacy/test_erasure.py). ``VACUUM`` rebuilds every page from the live
      rows. It rewrites the whole file (about 2 s for 250 MB) and needs free disk of
      about twice its size; ``vacuum=False`` skips it and accepts that residue.
    - The WAL: it holds page images from before the deletes (and the whole VACUUM)
      until a checkpoint; a TRUNCATE checkpoint copies the current pages into the
      database file and cuts the WAL to 0 bytes. Raises StoreUnavailable when a
      reader (possibly another process) kept it from finishing.

    ``timings``, when given, receives each step's duration in seconds (the bench).

    On PostgreSQL the committed deletes leave dead row versions until the server reuses
    their space, and every text in them is sealed. What this does there is rewrite the
    key store's table (:meth:`KeyRing.compact`), so the wrapped key of a purged user is
    in none of the database's files any more and what they sealed cannot be opened from
    any copy of the data, even with the master key. The server's WAL and archives keep
    their records until they are recycled (docs/privacy.md#postgresql).
    """
    if not db.engine.file:
        ring = db.sealer.ring
        if ring is not None:
            started = time.perf_counter()
            await asyncio.to_thread(ring.compact)
            if timings is not None:
                timings["keys_compact_s"] = time.perf_counter() - started
        return
    steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("fts_optimize_s", SearchIndex(db).optimize)
    ]
    if vacuum:
        steps.append(("vacuum_s", db.vacuum))
    # Copy what it can without the writer lock first (the VACUUM put the whole file in
    # the WAL); the TRUNCATE, which holds the lock, then has only the rest to do.
    steps += [("checkpoint_passive_s", db.checkpoint_passive), ("checkpoint_s", db.checkpoint)]
    for name, step in steps:
        started = time.perf_counter()
        await step()
        if timings is not None:
            timings[name] = time.perf_counter() - started
