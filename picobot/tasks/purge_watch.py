"""Deletions of user data by any process sharing the store (a purge here, ``picobot
purge``, another server, retention, a storage cap), noticed here within a check: what
this process keeps in memory of deleted data drops it.

Every such deletion moves the store's purge generation once committed
(:mod:`picobot.store.purge_generation`); the runtime looks every
:data:`PURGE_WATCH_SECS`, so a purge anywhere leaves this process's memory within a
second of its commit. A purge in this process also calls its hooks at once
(:attr:`~picobot.privacy.controller.PrivacyController.after_purge`).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable

from picobot.store import purge_generation
from picobot.store.db import Database

log = logging.getLogger(__name__)

PURGE_WATCH_SECS = 0.5
"""How often the runtime looks at the purge generation (one primary-key read)."""

Drop = Callable[[], object | Awaitable[object]]
"""What drops kept data that is gone: a plain or an async function."""


class PurgeWatch:
    """Calls every ``drops`` function when the purge generation moved since the previous
    check (a deletion by any process).

    The first check only notes where the generation stands: nothing kept before it
    predates this process's start. A drop that fails is logged and the others still run;
    the next move runs them all again.
    """

    def __init__(self, db: Database, drops: list[Drop]) -> None:
        self._db = db
        self.drops = drops
        self._seen: int | None = None

    async def check(self) -> bool:
        """Look once; returns whether the drops ran."""
        generation = await purge_generation.current(self._db)
        moved = self._seen is not None and generation != self._seen
        self._seen = generation
        if moved:
            for drop in self.drops:
                try:
                    result = drop()
                    if inspect.isawaitable(result):
                        await result
                except Exception:
                    log.exception("dropping what a purge deleted failed")
        return moved
