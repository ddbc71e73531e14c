"""Purges run by another process (``picobot purge``, a second server on the same
database), noticed here: what this process keeps of deleted text in memory drops it.

A purge in this process calls its hooks at once
(:attr:`~picobot.privacy.controller.PrivacyController.after_purge`); one in another
process only leaves its ``task_runs`` row, whose start time this watch compares on each
check.
"""

from __future__ import annotations

from collections.abc import Callable

from picobot.store.db import Database
from picobot.store.task_runs import PURGE_ERASE_TASK_NAME, last_run


class PurgeWatch:
    """Calls ``drop`` when a purge started since the previous check (by any process).

    The first check only notes where purges stand: nothing kept before it predates this
    process's start.
    """

    def __init__(self, db: Database, drop: Callable[[], object]) -> None:
        self._db = db
        self._drop = drop
        self._seen: float | None = None
        self._checked = False

    async def check(self) -> bool:
        """Look once; returns whether ``drop`` was called."""
        run = await last_run(self._db, PURGE_ERASE_TASK_NAME)
        started = run.last_started_at if run is not None else None
        moved = self._checked and started != self._seen
        self._seen, self._checked = started, True
        if moved:
            self._drop()
        return moved
