"""Reading a data directory's sealed texts from a plain ``sqlite3`` connection."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from picobot.config.keys import KeySettings
from picobot.store.connect import install_functions
from picobot.store.keys import open_keyring
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
