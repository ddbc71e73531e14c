"""The owner of every background task: one-off jobs and periodic jobs.

``async with TaskSupervisor() as sup`` scopes the tasks: on exit every one of them is
cancelled and awaited, so nothing outlives the runtime and asyncio never warns about a
task destroyed while pending. Failures are logged with their traceback and never kill
the supervisor; periodic jobs also keep an in-memory :class:`JobStatus` so an operator
can see a job that has been failing quietly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

log = logging.getLogger(__name__)

# Result and error strings are for a status line, not a log: keep them short.
_MAX_TEXT = 300


@dataclass(frozen=True, slots=True)
class JobStatus:
    """What a periodic job did last; times are wall-clock seconds since the epoch."""

    name: str
    interval_secs: float
    runs: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    running: bool = False
    last_started_at: float | None = None
    last_finished_at: float | None = None
    last_duration_secs: float | None = None
    last_ok: bool | None = None
    last_result: str | None = None
    """What the last successful run returned (``str()`` of it), if anything."""
    last_error: str | None = None
    """The error of the most recent failed run; kept after later successes."""
    last_error_at: float | None = None


def _short(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


class PeriodicJob:
    """Handle of a job started by :meth:`TaskSupervisor.every`."""

    def __init__(
        self,
        name: str,
        interval_secs: float,
        fn: Callable[[], Awaitable[object]],
        run_at_start: bool,
    ) -> None:
        self.name = name
        self._interval = interval_secs
        self._fn = fn
        self._run_at_start = run_at_start
        self._wake = asyncio.Event()
        self._changed = asyncio.Condition()
        self._status = JobStatus(name, interval_secs)

    @property
    def status(self) -> JobStatus:
        """A snapshot of the job's status."""
        return self._status

    def wake(self) -> None:
        """Run the job now instead of at the end of the current interval.

        A wake during a run causes one more run right after it.
        """
        self._wake.set()

    async def wait_runs(self, count: int) -> JobStatus:
        """Wait until the job has finished at least ``count`` runs; return its status."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._status.runs >= count)
            return self._status

    async def _loop(self) -> None:
        if not self._run_at_start:
            await self._wait_interval()
        while True:
            await self._run_once()
            await self._wait_interval()

    async def _wait_interval(self) -> None:
        # One sleep per interval, cut short by wake(); no polling of a flag.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=self._interval)
        self._wake.clear()

    async def _run_once(self) -> None:
        started, t0 = time.time(), time.monotonic()
        self._status = replace(self._status, running=True, last_started_at=started)
        try:
            result = await self._fn()
        except Exception as exc:
            log.exception("periodic job %s failed", self.name)
            s = self._status
            self._status = replace(
                s,
                failures=s.failures + 1,
                consecutive_failures=s.consecutive_failures + 1,
                last_ok=False,
                last_result=None,
                last_error=_short(f"{type(exc).__name__}: {exc}"),
                last_error_at=time.time(),
            )
        else:
            text = None if result is None else _short(str(result))
            self._status = replace(
                self._status, consecutive_failures=0, last_ok=True, last_result=text
            )
        finally:
            self._status = replace(
                self._status,
                runs=self._status.runs + 1,
                running=False,
                last_finished_at=time.time(),
                last_duration_secs=time.monotonic() - t0,
            )
        async with self._changed:
            self._changed.notify_all()


class TaskSupervisor:
    """Owns background tasks; use as ``async with TaskSupervisor() as sup:``."""

    def __init__(self) -> None:
        self._oneoff: set[asyncio.Task[None]] = set()
        self._periodic: dict[str, tuple[PeriodicJob, asyncio.Task[None]]] = {}
        self._open = False
        self._closed = False
        self.spawn_failures = 0
        """One-off tasks that ended with an exception since start."""

    async def __aenter__(self) -> TaskSupervisor:
        if self._open or self._closed:
            raise RuntimeError("a TaskSupervisor can be entered only once")
        self._open = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._open = False
        self._closed = True
        await self._cancel_all()

    @property
    def running(self) -> bool:
        """Whether tasks may be started (inside the ``async with`` block)."""
        return self._open

    def spawn(self, name: str, coro: Coroutine[Any, Any, object]) -> asyncio.Task[None]:
        """Run ``coro`` as a one-off background task named ``name``.

        The supervisor keeps a strong reference until the task ends (the event loop
        only keeps a weak one), logs an exception with its traceback, and cancels the
        task on exit. Raises RuntimeError outside the ``async with`` block.
        """
        if not self._open:
            coro.close()  # never awaited otherwise, which would warn
            raise RuntimeError(f"cannot spawn {name!r}: the task supervisor is not running")
        task = asyncio.create_task(self._guard(name, coro), name=name)
        self._oneoff.add(task)
        task.add_done_callback(self._oneoff.discard)
        # A task cancelled before its first step never starts ``coro``; closing it
        # then avoids a "never awaited" warning (a finished coroutine ignores close).
        task.add_done_callback(lambda _: coro.close())
        return task

    def every(
        self,
        name: str,
        interval_secs: float,
        fn: Callable[[], Awaitable[object]],
        *,
        run_at_start: bool = False,
    ) -> PeriodicJob:
        """Run ``fn()`` every ``interval_secs`` seconds until exit; return its handle.

        The interval is measured from the end of one run to the start of the next, so
        runs never overlap. A failing run is logged and recorded in :meth:`status`;
        the next run happens as usual. What ``fn`` returns becomes ``last_result``.
        """
        if not self._open:
            raise RuntimeError(f"cannot start {name!r}: the task supervisor is not running")
        if name in self._periodic:
            raise ValueError(f"periodic job {name!r} already exists")
        if interval_secs <= 0:
            raise ValueError(f"interval of {name!r} must be positive, got {interval_secs}")
        job = PeriodicJob(name, interval_secs, fn, run_at_start)
        task = asyncio.create_task(job._loop(), name=f"every:{name}")
        self._periodic[name] = (job, task)
        return job

    def job(self, name: str) -> PeriodicJob:
        """The handle of a periodic job by name (KeyError if there is none)."""
        return self._periodic[name][0]

    def status(self) -> dict[str, JobStatus]:
        """The status of every periodic job, by name."""
        return {name: job.status for name, (job, _) in self._periodic.items()}

    @property
    def pending(self) -> int:
        """How many one-off tasks are still running."""
        return len(self._oneoff)

    async def join(self) -> None:
        """Wait until every one-off task (including ones they spawn) has finished."""
        while self._oneoff:
            await asyncio.wait(set(self._oneoff))

    async def _guard(self, name: str, coro: Coroutine[Any, Any, object]) -> None:
        try:
            await coro
        except Exception:
            # Cancellation is a BaseException and passes through untouched.
            self.spawn_failures += 1
            log.exception("background task %s failed", name)

    async def _cancel_all(self) -> None:
        # spawn() and every() refuse once closed, so this set is final.
        tasks = [t for t in self._oneoff if not t.done()]
        tasks += [t for _, t in self._periodic.values() if not t.done()]
        for task in tasks:
            task.cancel()
        # Awaiting them is what lets each one run its cleanup; gather with
        # return_exceptions so one task's error does not abandon the others.
        await asyncio.gather(*tasks, return_exceptions=True)
        self._oneoff.clear()
