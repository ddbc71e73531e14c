"""Retention: delete conversation data older than ``max_age_days``, then erase it for real.

:class:`RetentionTask` is what the supervisor runs every ``cleanup_interval_secs``
(``tasks.every("retention", interval, task.run, run_at_start=True)``) and what
``picobot retention run`` runs once. A run deletes expired messages, tool records,
summaries and empty sessions in small transactions (:mod:`picobot.store.erasure.purge`), then
makes the deleted text unrecoverable (:func:`~picobot.store.erasure.erase.erase_residue`).
Explicit user memories are never touched. A run also prunes the webhook replay guard's
content-free records older than :data:`~picobot.store.channels.webhook_seen.SEEN_KEEP_SECS`
(on their own clock: no platform can deliver their messages any more), and pending
purges a day past their expiry (:mod:`picobot.store.erasure.pending_purges`).

The erasure rewrites the whole index and file and stalls every writer meanwhile
(seconds per GB), so a sweep runs it at most once per ``erase_interval_secs``: the
rows of a sweep in between are gone from every query at once, and their leftover bytes
wait for the next erasure, at most that interval plus one run interval later. The
``task_runs`` row ``retention-erase`` keeps the time of the last erasure and, when a
sweep deferred it, since when residue has been waiting. A run also erases at once what
a purge left when its erasure failed or a crash cut it short (row ``purge-erase``,
written by :class:`~picobot.privacy.controller.PrivacyController`). The storage caps
(:mod:`picobot.tasks.caps`) delete between runs and leave their residue to this erasure,
noted in the ``retention-erase`` row like a deferred sweep's.

Every real run is recorded in the ``task_runs`` table (migration m003): start, end,
ok, a one-line result or the error. The supervisor's JobStatus is lost on restart;
this row is not, so ``picobot status`` can show a retention job that has been failing
or that died mid-run. Logs and records hold counts and error types, never content.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from picobot.metrics import observe_retention
from picobot.store import purge_generation
from picobot.store.channels.webhook_seen import SEEN_KEEP_SECS, SeenRecords
from picobot.store.conversation.event_prune import record_alone
from picobot.store.db import Database
from picobot.store.erasure.erase import erase_residue
from picobot.store.erasure.pending_purges import PendingPurges
from picobot.store.erasure.purge import DEFAULT_BATCH_SIZE, PurgeCounts, PurgeStore
from picobot.store.task_runs import (
    ERASE_TASK_NAME,
    PURGE_ERASE_TASK_NAME,
    RESIDUE_WAITING,
    TASK_NAME,
    TaskRun,
    erasure_state,
    error_text,
    last_run,
    purge_left_residue,
    record_erasure,
    record_run,
    record_start,
)

log = logging.getLogger(__name__)

DAY_SECS = 86_400.0


def format_ts(ts: float) -> str:
    """An epoch timestamp as a UTC date and time, e.g. ``2024-05-01 12:00:00Z``."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class RetentionReport:
    """What one retention run deleted (or, for a dry run, would delete)."""

    cutoff: float
    """Data created before this epoch timestamp expired."""
    counts: PurgeCounts
    duration_secs: float
    dry_run: bool
    erased: bool = False
    """Whether this run erased the residue of deleted rows (the index and file rewrite)."""
    erase_due: float | None = None
    """When residue is left waiting: the time from which the next run erases it."""

    def __str__(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        text = (
            f"{verb} {self.counts.describe()} older than {format_ts(self.cutoff)}"
            f" in {self.duration_secs:.2f}s"
        )
        if self.erased:
            text += ", residue erased"
        elif self.erase_due is not None:
            text += f", residue to be erased from {format_ts(self.erase_due)}"
        return text


class RetentionTask:
    """Deletes conversation data older than ``max_age_days``; see the module docstring.

    ``clock`` gives the current epoch time (tests move it). ``vacuum`` is passed to
    :func:`erase_residue`; turning it off leaves stale bytes of deleted rows possible in
    page free space (see there). ``erase_interval_secs`` is the least time between two
    erasures (0: after every sweep that deleted something; ``picobot retention run``).
    ``actor`` is who runs it, as its ``retention.completed`` event says.
    """

    def __init__(
        self,
        db: Database,
        *,
        max_age_days: float,
        batch_size: int = DEFAULT_BATCH_SIZE,
        clock: Callable[[], float] = time.time,
        vacuum: bool = True,
        erase_interval_secs: float = 0.0,
        actor: str = "supervisor",
    ) -> None:
        if max_age_days <= 0:
            raise ValueError(f"max_age_days must be positive, got {max_age_days}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if erase_interval_secs < 0:
            raise ValueError(f"erase_interval_secs must be >= 0, got {erase_interval_secs}")
        self._db = db
        self._purge = PurgeStore(db)
        self._max_age_secs = max_age_days * DAY_SECS
        self._batch_size = batch_size
        self._clock = clock
        self._vacuum = vacuum
        self._erase_interval = erase_interval_secs
        self._first_run = True
        self._actor = actor  # who runs it, as the retention.completed event says
        self.on_deleted: list[Callable[[], None]] = []
        """Called after a run that deleted something: what keeps evaluated prompts drops
        them (see :meth:`LocalProvider.forget_prompts`)."""

    def cutoff(self) -> float:
        """The current cutoff: data created before it has expired."""
        return self._clock() - self._max_age_secs

    async def run(self, *, dry_run: bool = False) -> RetentionReport:
        """Delete expired data (or only count it, with ``dry_run``) and report counts.

        A failure is logged with its traceback, recorded in ``task_runs`` and re-raised
        (so the supervisor's JobStatus shows it too). A dry run records nothing: it
        deleted nothing, so it must not count as the last retention run.
        """
        started, t0 = self._clock(), time.monotonic()
        cutoff = started - self._max_age_secs
        if dry_run:
            counts = await self._purge.count_older(cutoff)
            report = RetentionReport(cutoff, counts, time.monotonic() - t0, dry_run=True)
            log.info("retention dry run: %s", report)
            return report
        deleting = False
        try:
            previous = await last_run(self._db, TASK_NAME)
            await record_start(self._db, TASK_NAME, started)
            deleting = True
            counts = await self._purge.delete_older(cutoff, batch_size=self._batch_size)
            deleting = False
            if counts.total:  # every process drops what it keeps of it (purge_watch)
                await purge_generation.advance(self._db)
            await SeenRecords(self._db).prune(started - SEEN_KEEP_SECS)
            await PendingPurges(self._db).prune(started)
            # Before the erasure, which then leaves the WAL empty of this write too.
            await record_alone(
                self._db,
                "retention.completed",
                self._clock(),
                actor=self._actor,
                payload={"counts": asdict(counts)},
            )
            erased, due = await self._erase(previous, counts, started)
            if counts.total:
                for drop in self.on_deleted:
                    drop()
        except Exception as exc:
            log.exception("retention failed after %.2fs", time.monotonic() - t0)
            if deleting:  # some of it may be deleted: the other processes look too
                await purge_generation.advance_after_failure(self._db)
            await self._record_failure(started, exc)
            raise
        report = RetentionReport(
            cutoff, counts, time.monotonic() - t0, dry_run=False, erased=erased, erase_due=due
        )
        await record_run(
            self._db,
            TASK_NAME,
            started_at=started,
            finished_at=self._clock(),
            ok=True,
            result=str(report),
        )
        observe_retention(self._clock(), counts.total)
        log.info("retention: %s", report)
        return report

    async def _erase(
        self, previous: TaskRun | None, counts: PurgeCounts, now: float
    ) -> tuple[bool, float | None]:
        """Erase residue if some is waiting and the interval has passed since the last
        erasure; returns (erased, when the waiting residue is due for erasure)."""
        state = await erasure_state(self._db, self._erase_interval)
        last = state.last_erased_at
        waiting = counts.total > 0 or state.waiting_since is not None
        # A previous run that failed, was killed or never ran may have left residue.
        suspect = previous is None or not previous.ok or previous.unfinished
        # So may a purge. A task's first run comes at start-up, before a purge of this
        # process has had much chance to start, so an unfinished one was most likely cut
        # short by a crash; later runs leave unfinished ones to the purge under way. (A
        # purge that is under way after all, here or in another process, gets erased
        # twice.)
        purge = await last_run(self._db, PURGE_ERASE_TASK_NAME)
        purge_left = purge_left_residue(purge, may_be_running=not self._first_run)
        self._first_run = False
        # An erasure recorded later than now (the clock ran ahead, then was put right)
        # tells nothing about the interval; waiting for the clock to catch up would
        # leave residue on disk for as long as it ran ahead.
        overdue = last is None or now < last or now - last >= self._erase_interval
        if suspect or purge_left or (waiting and overdue):
            began = self._clock()
            await erase_residue(self._db, vacuum=self._vacuum)
            await record_erasure(self._db, began, self._clock())
            if purge_left and purge is not None and purge.last_started_at is not None:
                await record_run(
                    self._db,
                    PURGE_ERASE_TASK_NAME,
                    started_at=purge.last_started_at,
                    finished_at=self._clock(),
                    ok=True,
                    result="erased by retention",
                )
            return True, None
        if not waiting:
            return False, None
        assert last is not None  # deferring needs an earlier erasure
        if state.waiting_since is None:
            # last_started_at becomes "residue waiting since"; the last erasure stays.
            await self._record_waiting(now, last)
        return False, last + self._erase_interval

    async def _record_waiting(self, since: float, erased: float) -> None:
        await record_run(
            self._db,
            ERASE_TASK_NAME,
            started_at=since,
            finished_at=erased,
            ok=True,
            result=RESIDUE_WAITING,
        )

    async def _record_failure(self, started: float, exc: Exception) -> None:
        try:
            await record_run(
                self._db,
                TASK_NAME,
                started_at=started,
                finished_at=self._clock(),
                ok=False,
                error=error_text(exc),
            )
        except Exception:
            # The database itself may be what failed; the log still has both errors.
            log.exception("could not record the failed retention run")
