"""The ``task_runs`` table: the durable record of each background job's last run.

The supervisor's JobStatus is lost on restart; a row here is not, so ``picobot status``,
the admin API and the dashboard can show a job that has been failing or that died
mid-run. Retention (:mod:`picobot.tasks.retention`) and purges
(:mod:`picobot.privacy.controller`) keep their bookkeeping here, and retention's
erasure state is read from it. Rows hold counts and error types, never content.
"""

from __future__ import annotations

from dataclasses import dataclass

from picobot.store.db import Database, Row

TASK_NAME = "retention"
"""Name of the retention job, in the supervisor and in ``task_runs``."""
ERASE_TASK_NAME = "retention-erase"
"""The ``task_runs`` row of retention's erasure: ``last_finished_at`` is the last
erasure; with result :data:`RESIDUE_WAITING`, ``last_started_at`` is since when swept
rows (or rows a storage cap deleted) have left residue waiting for the next one."""
RESIDUE_ERASED = "erased"
RESIDUE_WAITING = "residue waiting"
PURGE_ERASE_TASK_NAME = "purge-erase"
"""The ``task_runs`` row of purges: started before a purge deletes anything, finished
once its residue is erased. A purge that failed (ok false) or that a crash cut short
(unfinished) left residue, which the next retention run erases."""

_MAX_ERROR = 300


def error_text(exc: BaseException) -> str:
    """How a failed run's error is recorded: type and message, at most 300 characters."""
    error = f"{type(exc).__name__}: {exc}"
    return error if len(error) <= _MAX_ERROR else error[: _MAX_ERROR - 3] + "..."


@dataclass(frozen=True, slots=True)
class TaskRun:
    """The durable record of a background job's last run (a ``task_runs`` row)."""

    name: str
    last_started_at: float | None
    last_finished_at: float | None
    ok: bool | None
    """Outcome of the last finished run; None before the first one finished."""
    result: str | None
    error: str | None

    @property
    def unfinished(self) -> bool:
        """Whether the last run started but never finished (still running, or killed)."""
        if self.last_started_at is None:
            return False
        return self.last_finished_at is None or self.last_finished_at < self.last_started_at


async def record_start(db: Database, name: str, started_at: float) -> None:
    """Note that job ``name`` started; the previous outcome stays until it finishes."""
    async with db.transaction() as conn:
        await conn.execute(
            "INSERT INTO task_runs (name, last_started_at) VALUES (?, ?)"
            " ON CONFLICT (name) DO UPDATE SET last_started_at = excluded.last_started_at",
            (name, started_at),
        )


async def record_run(
    db: Database,
    name: str,
    *,
    started_at: float,
    finished_at: float,
    ok: bool,
    result: str | None = None,
    error: str | None = None,
) -> None:
    """Store the outcome of job ``name``'s run, replacing the previous one."""
    async with db.transaction() as conn:
        await conn.execute(
            "INSERT INTO task_runs (name, last_started_at, last_finished_at, ok, result, error)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET"
            " last_started_at = excluded.last_started_at,"
            " last_finished_at = excluded.last_finished_at, ok = excluded.ok,"
            " result = excluded.result, error = excluded.error",
            (name, started_at, finished_at, int(ok), result, error),
        )


async def note_residue(db: Database, since: float) -> None:
    """Record that rows deleted outside a retention sweep (by a storage cap) leave residue
    waiting for retention's next erasure; residue already waiting keeps its earlier time.

    Called before the deletion, so a crash in its middle still leaves the note.
    """
    async with db.transaction() as conn:
        await conn.execute(
            "INSERT INTO task_runs (name, last_started_at, ok, result) VALUES (?1, ?2, 1, ?3)"
            " ON CONFLICT (name) DO UPDATE SET last_started_at = excluded.last_started_at,"
            " result = excluded.result WHERE task_runs.result IS NOT ?3",
            (ERASE_TASK_NAME, since, RESIDUE_WAITING),
        )


async def record_erasure(db: Database, started_at: float, finished_at: float) -> None:
    """Record retention's erasure, begun at ``started_at``, as the last one.

    Residue noted after it began (a cap's deletion that waited for the erasure's lock)
    stays waiting for the next erasure instead of being recorded as erased.
    """
    async with db.transaction() as conn:
        # A note newer than ?2 stays (the SET expressions read the row as it was).
        await conn.execute(
            "INSERT INTO task_runs (name, last_started_at, last_finished_at, ok, result)"
            " VALUES (?1, ?2, ?3, 1, ?5) ON CONFLICT (name) DO UPDATE SET"
            " last_finished_at = excluded.last_finished_at, ok = 1, error = NULL,"
            " last_started_at = CASE WHEN task_runs.result = ?4 AND task_runs.last_started_at"
            " > ?2 THEN task_runs.last_started_at ELSE ?2 END,"
            " result = CASE WHEN task_runs.result = ?4 AND task_runs.last_started_at > ?2"
            " THEN ?4 ELSE ?5 END",
            (ERASE_TASK_NAME, started_at, finished_at, RESIDUE_WAITING, RESIDUE_ERASED),
        )


async def last_run(db: Database, name: str) -> TaskRun | None:
    """The recorded last run of job ``name``, or None if it never ran."""
    row = await db.fetchone(
        "SELECT name, last_started_at, last_finished_at, ok, result, error"
        " FROM task_runs WHERE name = ?",
        (name,),
    )
    return None if row is None else _task_run(row)


@dataclass(frozen=True, slots=True)
class ErasureState:
    """Where retention's erasure stands (``picobot status``, the admin API)."""

    last_erased_at: float | None
    waiting_since: float | None
    """Since when rows deleted by retention have left residue, or None if none waits."""
    due: float | None
    """From when the next retention run erases the waiting residue."""
    purge_residue_since: float | None = None
    """When a purge whose erasure failed or was cut short started (the next retention
    run erases what it left), or None."""


async def erasure_state(db: Database, erase_interval_secs: float) -> ErasureState:
    """The recorded state of retention's erasure (see :data:`ERASE_TASK_NAME`)."""
    run = await last_run(db, ERASE_TASK_NAME)
    purge = await last_run(db, PURGE_ERASE_TASK_NAME)
    since = purge.last_started_at if purge is not None and purge_left_residue(purge) else None
    if run is None:
        return ErasureState(None, None, None, since)
    last = run.last_finished_at
    if run.result != RESIDUE_WAITING:
        return ErasureState(last, None, None, since)
    # Residue noted before any erasure ever ran (a cap's) is due at once.
    due = run.last_started_at if last is None else last + erase_interval_secs
    return ErasureState(last, run.last_started_at, due, since)


def purge_left_residue(run: TaskRun | None, *, may_be_running: bool = False) -> bool:
    """Whether the purge recorded in ``run`` failed or stopped before its erasure ended.

    With ``may_be_running``, an unfinished row is taken for a purge still under way
    (it erases when it ends), not for one a crash cut short.
    """
    if run is None or run.last_started_at is None:
        return False
    if run.unfinished:
        return not may_be_running
    return run.ok is False


def _real(value: float | None) -> float | None:
    return None if value is None else float(value)


def _task_run(row: Row) -> TaskRun:
    return TaskRun(
        name=str(row["name"]),
        last_started_at=_real(row["last_started_at"]),
        last_finished_at=_real(row["last_finished_at"]),
        ok=None if row["ok"] is None else bool(row["ok"]),
        result=row["result"],
        error=row["error"],
    )
