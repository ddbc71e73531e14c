"""Background jobs that run on one instance at a time among several sharing a store.

Two ``picobot serve`` processes on one store would otherwise both run every periodic
job: retention's erasure twice at once, a session learned from twice (duplicate facts),
summaries written twice. A job made cluster-wide with :meth:`ClusterJobs.once` runs
only on the instance holding its lease (:mod:`picobot.store.leases`); on the others a
run is skipped and says so in the job's status. The holder keeps its leases by renewing
them every third of :data:`LEASE_SECS` (:meth:`ClusterJobs.keep`, a job of every
instance) and gives them up when it stops; an instance killed -9 keeps them until they
expire, after which the next run of another instance takes them over.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from picobot.store.db import Database
from picobot.store.instance import new_instance_id
from picobot.store.leases import release, take

log = logging.getLogger(__name__)

LEASE_SECS = 30.0
"""How long a lease lasts unrenewed: a dead holder's jobs move on within this long."""
SKIPPED = "skipped: another instance runs this job"
"""A skipped run's result, as the job's status shows it."""


class ClusterJobs:
    """The leases of this instance's cluster-wide jobs.

    Between two renewals a job runs on the strength of the lease as last renewed, so a
    frequent job (the recall indexer, every half second) costs no write per run. An
    instance whose event loop stalls past a lease's expiry may overlap, for that run, with
    the instance that took it over.
    """

    def __init__(
        self,
        db: Database,
        holder: str | None = None,
        *,
        lease_secs: float = LEASE_SECS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self.holder = holder if holder is not None else new_instance_id()
        self.lease_secs = lease_secs
        self._clock = clock
        self._until: dict[str, float] = {}
        """Held leases by name: when each expires as last taken or renewed."""

    @property
    def keep_interval(self) -> float:
        """How often :meth:`keep` must run: a third of the lease, so one late renewal
        does not lose it."""
        return self.lease_secs / 3

    @property
    def held(self) -> set[str]:
        """The jobs this instance holds the lease of."""
        return set(self._until)

    def once(
        self, name: str, fn: Callable[[], Awaitable[object]]
    ) -> Callable[[], Awaitable[object]]:
        """``fn`` as a job that runs only on the instance holding ``name``'s lease."""

        async def run() -> object:
            if not await self._hold(name):
                return SKIPPED
            return await fn()

        return run

    async def _hold(self, name: str) -> bool:
        now = self._clock()
        if self._until.get(name, 0.0) - now > self.lease_secs / 2:
            return True  # renewed lately: no write for this run
        got = await take(self._db, [name], self.holder, now + self.lease_secs, now)
        self._note(got, [name], now)
        return name in got

    async def keep(self) -> int:
        """Renew every lease this instance holds; how many it still holds."""
        names = sorted(self._until)
        if names:
            now = self._clock()
            got = await take(self._db, names, self.holder, now + self.lease_secs, now)
            self._note(got, names, now)
        return len(self._until)

    def _note(self, got: set[str], asked: list[str], now: float) -> None:
        for name in asked:
            if name in got:
                self._until[name] = now + self.lease_secs
            elif self._until.pop(name, None) is not None:
                log.warning("lost the lease of job %s to another instance", name)

    async def release_all(self) -> None:
        """Give up every lease this instance holds (on a clean stop), so another instance
        takes them over at its next run instead of after they expire. A store that fails
        now is logged, not raised: the leases expire by themselves."""
        held, self._until = sorted(self._until), {}
        if not held:
            return
        try:
            await release(self._db, held, self.holder)
        except Exception as exc:
            log.warning(
                "leases of %s not given up (%s); they expire within %g s",
                ", ".join(held),
                type(exc).__name__,
                self.lease_secs,
            )
