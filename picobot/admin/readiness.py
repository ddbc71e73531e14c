"""``/readyz``: whether this process can serve writes, for orchestrators and balancers.

Ready means a write commits, the schema is the one this PicoBot knows (not one a newer
instance migrated) and the data directory's disk has room.

The probe commits a write (:func:`picobot.store.health.probe_writable`), so it is not
run for every request of a public endpoint: concurrent requests share one probe, and a
result is reused for ``max_age_secs``. A change of state is logged once, with the
reason; the public answer names only which part failed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from aiohttp import web

from picobot.admin.http import json_response
from picobot.admin.models import Readiness
from picobot.store.db import Database
from picobot.store.health import WriteProbe, probe_writable

log = logging.getLogger(__name__)

MAX_AGE_SECS = 1.0
"""How long one probe's answer is reused."""


class ReadinessProbe:
    """Runs and caches the write probe of one database."""

    def __init__(
        self,
        db: Database,
        min_free_bytes: int,
        *,
        max_age_secs: float = MAX_AGE_SECS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._min_free = min_free_bytes
        self._max_age = max_age_secs
        self._clock = clock
        self._last: tuple[float, WriteProbe] | None = None
        self._running: asyncio.Task[WriteProbe] | None = None
        self._was_ready = True

    async def check(self) -> WriteProbe:
        """The latest findings, probing again when they are older than ``max_age_secs``."""
        if self._last is not None and self._clock() - self._last[0] < self._max_age:
            return self._last[1]
        if self._running is None:
            self._running = asyncio.create_task(self._probe())
        # Shielded: one client hanging up must not cancel the probe the others wait for.
        return await asyncio.shield(self._running)

    async def _probe(self) -> WriteProbe:
        try:
            found = await probe_writable(self._db, min_free_bytes=self._min_free)
        finally:
            self._running = None
        self._last = (self._clock(), found)
        if found.ready != self._was_ready:
            self._was_ready = found.ready
            if found.ready:
                log.info("readiness: the store takes writes again")
            else:
                log.warning("readiness: not ready: %s", found.problem)
        return found

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """``GET /readyz`` (public): 200 when the store takes writes on this version's
        schema, else 503."""
        found = await self.check()
        body = Readiness(
            status="ready" if found.ready else "unavailable",
            database="ok" if found.database_ok else "unavailable",
            migrations=found.migrations,
            disk="ok" if found.disk_ok else "low",
        )
        return json_response(body, 200 if found.ready else 503)
