"""Reading a data directory's sealed texts from a plain ``sqlite3`` connection."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from picobot.config.keys import KeySettings
from picobot.store.connect import install_functions
from picobot.store.db import Database
from picobot.store.keys import open_keyring
from picobot.store.keys.backfill import SEALED_COLUMNS
from picobot.store.keys.keyring import KEY_STORE_FILE
from picobot.store.keys.sealing import Sealer


@contextmanager
def opened(conn: sqlite3.Connection, data_dir: Path) -> Iterator[sqlite3.Connection]:
    """``conn`` with PicoBot's SQL functions, ``picobot_open`` using the data dir's keys."""
    ring = (
        open_keyring(data_dir, KeySettings(), {}) if (data_dir / KEY_STORE_FILE).exists() else None
    )
    try:
        install_functions(conn, Sealer(ring))
        yield conn
    finally:
        if ring is not None:
            ring.close()


async def sealed_tails(db: Database, markers: Iterable[str]) -> dict[str, bytes]:
    """Each marker's row as stored (sealed), by its last 20 bytes: what a byte scan
    looks for to tell that the row's ciphertext is gone too, not only unreadable.

    A marker is looked for in every sealed text column (the store's
    :data:`~picobot.store.keys.backfill.SEALED_COLUMNS`); of the sealed values holding
    it, the last one found is kept.
    """
    wanted = list(markers)
    found: dict[str, bytes] = {}
    for sealed in SEALED_COLUMNS:
        if sealed.function != "picobot_seal":
            continue  # vectors hold no words
        table, column = sealed.table, sealed.column
        sql = f"SELECT {column} FROM {table} WHERE instr(picobot_open({column}), ?) > 0"  # noqa: S608
        for marker in wanted:
            for row in await db.fetchall(sql, (marker,)):
                if isinstance(row[0], bytes):
                    found[marker] = bytes(row[0])[-20:]
    return found


def scan_bytes(data_dir: Path, tails: dict[str, bytes]) -> set[str]:
    """The markers whose sealed bytes (:func:`sealed_tails`) are in a file under ``data_dir``."""
    blobs = [p.read_bytes() for p in sorted(data_dir.rglob("*")) if p.is_file()]
    return {marker for marker, tail in tails.items() if any(tail in b for b in blobs)}
