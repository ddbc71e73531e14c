"""Export: everything stored about one user, for them or an operator.

The records and their order are :mod:`picobot.privacy.export`'s; this is what the
front ends call (the admin API and the dashboard stream JSONL, the CLI writes a file).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import IO

from picobot.privacy.export import ExportFormat, export_user
from picobot.privacy.export import iter_user_jsonl as _jsonl
from picobot.services.export_tokens import ExportTokens
from picobot.store.db import Database
from picobot.store.erasure.export import ExportStats, count_user_data
from picobot.store.erasure.export_files import new_export_file
from picobot.store.keys.sealed_files import sealed_text_file


class ExportService:
    """Counts and exports of one user's data."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.tokens = ExportTokens()
        """Download tokens of ``/export`` over WebSocket (single use, 10 minutes)."""

    async def count(self, user_id: str) -> ExportStats:
        """What an export of ``user_id`` would hold, counted without reading the text."""
        return await count_user_data(self._db, user_id)

    def jsonl(self, user_id: str) -> AsyncIterator[str]:
        """The JSONL export of ``user_id``, one line at a time."""
        return _jsonl(self._db, user_id)

    async def write_file(
        self, user_id: str, now: float, *, sealed: bool = False
    ) -> tuple[Path, ExportStats]:
        """Write ``user_id``'s JSONL export to a new 0600 file under the data directory
        (``exports/``; purges and retention delete it); the file and what it holds.

        ``sealed``: the file is sealed with the user's key (a file that waits to be sent,
        read back with :func:`picobot.store.keys.sealed_files.open_sealed`).
        """
        path = new_export_file(self._db.path.parent, user_id, now)
        try:
            if sealed:
                with sealed_text_file(path, self._db.sealer, user_id) as out:
                    stats = await export_user(self._db, user_id, out)
            else:
                with path.open("w", encoding="utf-8") as out:
                    stats = await export_user(self._db, user_id, out)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path, stats

    async def write(
        self,
        user_id: str,
        out: IO[str],
        *,
        fmt: ExportFormat = "jsonl",
        progress: Callable[[int, int], None] | None = None,
    ) -> ExportStats:
        """Write the export of ``user_id`` to ``out``; what was written."""
        return await export_user(self._db, user_id, out, fmt=fmt, progress=progress)
