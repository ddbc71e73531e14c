"""``--embeddings``: recall by meaning on vs off, in the same run.

With ``--embeddings`` every conversation is replayed twice, on the same data and the
same stand-in: as configured, and with ``[embeddings] provider = "local"`` (the
offline all-MiniLM-L6-v2). The second run's systems are reported as
``picobot+vectors (MODE)`` beside the first's. Questions are asked only once the
server's background indexer has embedded every turn (:func:`wait_for_vectors` reads
the server's database, read-only), as on a server that has been running a while.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from picobot.config.keys import KeySettings
from picobot.store.connect import install_functions
from picobot.store.keys import open_keyring
from picobot.store.keys.sealing import Sealer
from picobot.store.retrieval.terms import has_content

PROVIDER_ENV = "PICOBOT_EMBEDDINGS__PROVIDER"
ON = {PROVIDER_ENV: "local"}
WAIT_TIMEOUT_SECS = 3600.0


def vectors_on(settings_env: Mapping[str, str]) -> bool:
    """Whether these settings turn an embedding model on."""
    return settings_env.get(PROVIDER_ENV, "none").strip() not in ("", "none")


def _missing(db_path: Path) -> int:
    """Messages with content and no vector yet (texts opened with the server's keys)."""
    ring = open_keyring(db_path.parent, KeySettings(), {})
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        install_functions(conn, Sealer(ring))
        rows = conn.execute(
            "SELECT picobot_open(m.content) FROM messages m WHERE m.role IN ('user', 'assistant')"
            " AND NOT EXISTS (SELECT 1 FROM message_vectors v WHERE v.message_id = m.id)"
        ).fetchall()
    finally:
        conn.close()
        ring.close()
    return sum(has_content(str(r[0])) for r in rows)


async def wait_for_vectors(db_path: Path, progress: Any = None, poll_secs: float = 1.0) -> float:
    """Wait until every message with content has its vector; the seconds waited."""
    started = time.monotonic()
    while True:
        left = await asyncio.to_thread(_missing, db_path)
        if left == 0:
            return round(time.monotonic() - started, 1)
        if time.monotonic() - started > WAIT_TIMEOUT_SECS:
            raise TimeoutError(f"{left} messages still without a vector in {db_path}")
        await asyncio.sleep(poll_secs)


def merge(doc: dict[str, Any], with_vectors: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` plus the PicoBot systems and modes of the run ``with_vectors``."""
    for name, figures in with_vectors["systems"].items():
        if name.startswith("picobot ("):
            doc["systems"][name.replace("picobot (", "picobot+vectors (", 1)] = figures
    for label, details in with_vectors["modes"].items():
        doc["modes"][f"{label} + vectors"] = details
    doc["run"]["embeddings"] = {
        "on_run": dict(ON),
        "wall_seconds": with_vectors["run"]["wall_seconds"],
    }
    doc["conversations_with_vectors"] = with_vectors["conversations"]
    return doc
