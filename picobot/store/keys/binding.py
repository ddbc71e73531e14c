"""Binding a database to its key store, and keeping the recall index's terms in step.

A database whose texts were sealed under one key store is refused under another (a
fresh key store over old data would read everything as erased and seal new rows under
keys the old ones never had). When the way index terms are made changes (a database
from before per-user keys, or a new key store), the index is rebuilt under the new one.
"""

from __future__ import annotations

import logging
import sqlite3

from picobot.errors import StoreUnavailable
from picobot.store.db import Database
from picobot.store.retrieval.search_writes import requeue_index

log = logging.getLogger(__name__)


async def bind_key_store(db: Database, *, write: bool = True) -> None:
    """Check (and on first use record) which key store seals ``db``; rebuild stale terms.

    Without a key store (``Database.open`` by tools and tests) nothing is checked or
    written; with ``write`` False (a command that only reads) only the check is made.
    Raises StoreUnavailable for a database bound to another key store.
    """
    ring = db.sealer.ring
    if ring is None:
        return
    table = await db.fetchone(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'store_meta'"
    )
    if table is None:  # a schema from before keys: migrating binds it
        return
    meta = {str(r[0]): str(r[1]) for r in await db.fetchall("SELECT name, value FROM store_meta")}
    bound = meta.get("key_store")
    if bound is not None and bound != ring.store_id:
        raise StoreUnavailable(
            f"database {db.path} is sealed with key store {bound}, but {ring.path} is key"
            f" store {ring.store_id}: put back the key store that belongs to it (or a copy"
            " from [keys] backup_dir); see docs/privacy.md#per-user-keys"
        )
    scheme = db.sealer.terms_scheme
    if not write or (bound is not None and meta.get("index_terms") == scheme):
        return

    def bind(conn: sqlite3.Connection) -> int:
        requeued = 0 if meta.get("index_terms", "") == scheme else requeue_index(conn)
        conn.executemany(
            "INSERT INTO store_meta (name, value) VALUES (?, ?)"
            " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            [("key_store", ring.store_id), ("index_terms", scheme)],
        )
        return requeued

    requeued = await db.write(bind)
    if requeued:
        log.warning("the recall index is rebuilt under per-user keys: %d records queued", requeued)
