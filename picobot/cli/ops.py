"""Operator subcommands: ``retention run [--dry-run]`` and ``status``.

Registered on the main parser by :func:`add_ops_commands`; each handler loads the
settings and returns an exit status like the other ``picobot`` subcommands. Neither
command creates a database that does not exist yet, and ``status`` never migrates one.
Store modules are imported inside the handlers so ``picobot --help`` stays light.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from picobot.cli.common import EXIT_OK
from picobot.config.settings import Settings, load_settings

if TYPE_CHECKING:
    from picobot.store.migrations import SchemaState
    from picobot.tasks.retention import ErasureState, RetentionReport, TaskRun


def add_ops_commands(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    *,
    parents: Sequence[argparse.ArgumentParser] = (),
) -> None:
    """Add ``retention run [--dry-run]`` and ``status`` to ``subparsers``.

    ``parents`` are shared parent parsers (the CLI's ``--config`` after the command).
    Each leaf parser gets a ``handler(args) -> int`` default, as in :mod:`picobot.cli.main`.
    """
    retention_help = "delete expired conversation data now (see [session.retention])"
    retention = subparsers.add_parser(
        "retention", help=retention_help, description=retention_help, parents=list(parents)
    )
    actions = retention.add_subparsers(
        dest="retention_action", metavar="ACTION", title="actions", required=True
    )
    run_help = "run the retention sweep now and print what it deleted"
    run = actions.add_parser("run", help=run_help, description=run_help, parents=list(parents))
    run.add_argument(
        "--dry-run", action="store_true", help="only count what would be deleted; delete nothing"
    )
    run.set_defaults(handler=_with_settings(run_retention))

    status_help = "show the database, its contents and the last retention run"
    status = subparsers.add_parser(
        "status", help=status_help, description=status_help, parents=list(parents)
    )
    status.set_defaults(handler=_with_settings(run_status))


def _with_settings(
    fn: Callable[[argparse.Namespace, Settings], int],
) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        return fn(args, load_settings(getattr(args, "config", None)))

    return handler


# --- retention run --------------------------------------------------------------------


def run_retention(args: argparse.Namespace, settings: Settings) -> int:
    """``picobot retention run [--dry-run]``: one retention sweep, then its report."""
    if not settings.db_path.is_file():
        print(f"no database at {settings.db_path}; nothing to delete")
        return EXIT_OK
    report = asyncio.run(_retention(settings, dry_run=bool(args.dry_run)))
    for line in format_report(report, settings.session.retention.max_age_days):
        print(line)
    return EXIT_OK


async def _retention(settings: Settings, *, dry_run: bool) -> RetentionReport:
    from picobot.runtime import open_database
    from picobot.tasks.retention import RetentionTask

    async with open_database(settings) as db:
        task = RetentionTask(
            db,
            max_age_days=settings.session.retention.max_age_days,
            batch_size=settings.privacy.retention_batch_size,
        )
        return await task.run(dry_run=dry_run)


def format_report(report: RetentionReport, max_age_days: float) -> list[str]:
    """The lines ``retention run`` prints for ``report``."""
    from picobot.tasks.retention import format_ts

    title = "retention (dry run, nothing deleted)" if report.dry_run else "retention"
    verb = "would delete" if report.dry_run else "deleted"
    return [
        f"{title}: cutoff {format_ts(report.cutoff)} ({max_age_days:g} days ago)",
        f"  {verb}: {report.counts.describe()}",
        f"  took {report.duration_secs:.2f}s" + (", residue erased" if report.erased else ""),
    ]


# --- status ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreStatus:
    """What ``picobot status`` reports about the database."""

    schema_version: int
    known_version: int
    sessions: int
    messages: int
    memories: int
    retention: TaskRun | None
    erasure: ErasureState | None = None
    queued_for_index: int = 0
    """Messages the runtime's recall indexer has not indexed yet."""


def run_status(args: argparse.Namespace, settings: Settings) -> int:
    """``picobot status``: database path and size, contents, last retention run."""
    path = settings.db_path
    if not path.is_file():
        print(f"database: {path} (not created yet)")
        return EXIT_OK
    status = asyncio.run(_status(settings))
    lines = [f"database: {path}"]
    # Read after the open/close above: close checkpoints, so the WAL shows 0 bytes
    # unless a running server has written since.
    wal = path.with_name(path.name + "-wal")
    wal_size = wal.stat().st_size if wal.is_file() else 0
    lines.append(f"size: {human_bytes(path.stat().st_size)} (WAL {human_bytes(wal_size)})")
    if isinstance(status, StoreStatus):
        interval = settings.session.retention.cleanup_interval_secs
        lines += format_status(status, interval, time.time())
    else:
        lines += format_schema(status)
    for line in lines:
        print(line)
    return EXIT_OK


async def _status(settings: Settings) -> StoreStatus | SchemaState:
    """The status, or only the schema state when the schema is not current.

    The file is left as it is (status never migrates), and an older schema may lack
    the tables that are counted.
    """
    from picobot.runtime import open_database
    from picobot.store.migrations import schema_state
    from picobot.tasks.retention import TASK_NAME, erasure_state, last_run

    async with open_database(settings, schema="as_is") as db:
        schema = await schema_state(db)
        if schema.behind or schema.ahead:
            return schema
        row = await db.fetchone(
            "SELECT (SELECT COUNT(*) FROM sessions), (SELECT COUNT(*) FROM messages),"
            " (SELECT COUNT(*) FROM user_memories), (SELECT COUNT(*) FROM search_pending)"
        )
        assert row is not None  # a SELECT without FROM always yields one row
        return StoreStatus(
            schema_version=schema.current,
            known_version=schema.known,
            sessions=int(row[0]),
            messages=int(row[1]),
            memories=int(row[2]),
            queued_for_index=int(row[3]),
            retention=await last_run(db, TASK_NAME),
            erasure=await erasure_state(db, settings.session.retention.erase_interval_secs),
        )


def format_schema(schema: SchemaState) -> list[str]:
    """The lines of ``picobot status`` after the path and size for a schema not current."""
    lines = [f"schema version: {schema.current} of {schema.known}"]
    if schema.ahead:
        lines.append("warning: a newer PicoBot has upgraded this database; upgrade PicoBot")
    else:
        lines.append(
            f"warning: {schema.known - schema.current} migration(s) pending; run"
            " `picobot migrate` to upgrade the database (status does not), then status"
            " shows its contents"
        )
    return lines


def format_status(status: StoreStatus, interval_secs: float, now: float) -> list[str]:
    """The lines of ``picobot status`` after the path and size, warnings last."""
    from picobot.tasks.retention import format_ts

    lines = [
        f"schema version: {status.schema_version} of {status.known_version}",
        f"sessions: {status.sessions}",
        f"messages: {status.messages}",
        f"memories: {status.memories}",
    ]
    if status.queued_for_index:
        # Normal while a server runs (it indexes every INDEX_INTERVAL_SECS); without
        # one they wait for the next start or an explicit search.
        lines.append(f"recall index: {status.queued_for_index} new messages not indexed yet")
    run = status.retention
    stale_after = 2 * interval_secs
    if run is None or run.last_started_at is None:
        lines.append("retention: never run")
        # The purge warning too: a purge that failed before retention ever ran is the
        # case an operator most needs to hear about.
        lines += _erasure_lines(status.erasure)
        lines.append("warning: retention has never run; start the server or run `retention run`")
        return lines
    if run.last_finished_at is not None:
        outcome = f"ok, {run.result}" if run.ok else f"FAILED, {run.error}"
        lines.append(f"retention: last run {format_ts(run.last_finished_at)}, {outcome}")
    if run.unfinished:
        lines.append(f"retention: a run started {format_ts(run.last_started_at)} has not finished")
    lines += _erasure_lines(status.erasure)
    last = max(run.last_started_at, run.last_finished_at or 0.0)
    if run.ok is False:
        lines.append("warning: the last retention run failed; see the error above and the log")
    if now - last > stale_after:
        lines.append(
            f"warning: retention last ran {human_duration(now - last)} ago, more than twice"
            f" its interval ({human_duration(interval_secs)}); is the server running?"
        )
    return lines


def _erasure_lines(erasure: ErasureState | None) -> list[str]:
    """What ``status`` says about residue waiting to be erased, if any."""
    from picobot.tasks.retention import format_ts

    out: list[str] = []
    if erasure is not None and erasure.waiting_since is not None and erasure.due is not None:
        out.append(
            f"retention: rows deleted since {format_ts(erasure.waiting_since)} leave residue"
            f" until the first run from {format_ts(erasure.due)} erases it"
        )
    if erasure is not None and erasure.purge_residue_since is not None:
        out.append(
            f"warning: a purge started {format_ts(erasure.purge_residue_since)} has not"
            " erased what it deleted (it failed, was cut short or is still running);"
            " the next retention run erases it"
        )
    return out


def human_bytes(size: int) -> str:
    """``1536`` -> ``1.5 KiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_duration(secs: float) -> str:
    """``5400`` -> ``1.5h``; seconds, minutes, hours or days."""
    for unit, size in (("d", 86_400.0), ("h", 3_600.0), ("m", 60.0)):
        if secs >= size:
            return f"{secs / size:.3g}{unit}"
    return f"{secs:.0f}s"
