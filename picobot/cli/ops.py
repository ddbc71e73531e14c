"""Operator subcommands: ``retention run [--dry-run] [--json]``, and ``status`` (whose
handler lives in :mod:`picobot.cli.status`).

Registered on the main parser by :func:`add_ops_commands`; each handler loads the
settings and returns an exit status like the other ``picobot`` subcommands.
``retention run`` creates no database that does not exist yet. Store modules are
imported inside the handlers so ``picobot --help`` stays light.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from picobot.cli.common import (
    EXIT_OK,
    Subcommands,
    add_json_flag,
    iso,
    print_json,
    record_json,
    with_settings,
)
from picobot.cli.operator import command_logging, operator_id
from picobot.cli.status import run_status
from picobot.config.settings import Settings

if TYPE_CHECKING:
    from picobot.store.erasure.purge import PurgeCounts
    from picobot.tasks.retention import RetentionReport

log = logging.getLogger(__name__)


def add_ops_commands(
    subparsers: Subcommands, *, parents: Sequence[argparse.ArgumentParser] = ()
) -> None:
    """Add ``retention run [--dry-run] [--json]`` and ``status [--json]`` to ``subparsers``.

    ``parents`` are shared parent parsers (the CLI's ``--config`` after the command).
    Each leaf parser gets a ``handler(args) -> int`` default, as in :mod:`picobot.cli.main`.
    """
    retention_help = "delete expired conversation data now (see [session.retention])"
    retention = subparsers.add_parser(
        "retention", help=retention_help, description=retention_help, parents=parents
    )
    actions = retention.add_subparsers(
        dest="retention_action", metavar="ACTION", title="actions", required=True
    )
    run_help = "run the retention sweep now and print what it deleted"
    run = actions.add_parser("run", help=run_help, description=run_help, parents=parents)
    run.add_argument(
        "--dry-run", action="store_true", help="only count what would be deleted; delete nothing"
    )
    add_json_flag(run)
    run.set_defaults(handler=with_settings(run_retention))

    status_help = "show the database, its contents and the last retention run"
    status = subparsers.add_parser(
        "status", help=status_help, description=status_help, parents=parents
    )
    add_json_flag(status)
    status.set_defaults(handler=with_settings(run_status))


# --- retention run --------------------------------------------------------------------


def run_retention(args: argparse.Namespace, settings: Settings) -> int:
    """``picobot retention run [--dry-run] [--json]``: one retention sweep, then its report.

    Logged like the server's runs, plus one line naming the operator who ran it.
    """
    dry_run = bool(args.dry_run)
    report: RetentionReport | None = None
    if settings.has_store:
        with command_logging(settings):
            report = asyncio.run(_retention(settings, dry_run=dry_run))
            log.info(
                "retention %s by %s: %s",
                "dry run" if dry_run else "run",
                operator_id(),
                report,
            )
    max_age = settings.session.retention.max_age_days
    if args.json:
        print_json(report_json(report, dry_run=dry_run, max_age_days=max_age))
    elif report is None:
        print(f"no database at {settings.db_path}; nothing to delete")
    else:
        for line in format_report(report, max_age):
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
            actor=operator_id(),
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


def counts_json(counts: PurgeCounts | None) -> dict[str, int]:
    """Rows by kind (every PurgeCounts field) and their total; zeros for None."""
    from picobot.store.erasure.purge import PurgeCounts

    counts = counts or PurgeCounts()
    return record_json(counts) | {"total": counts.total}


def report_json(
    report: RetentionReport | None, *, dry_run: bool, max_age_days: float
) -> dict[str, Any]:
    """``retention run --json``; ``report`` None: no database, nothing deleted."""
    return {
        "dry_run": dry_run,
        "max_age_days": max_age_days,
        "cutoff": iso(report.cutoff) if report else None,
        "counts": counts_json(report.counts if report else None),
        "duration_secs": round(report.duration_secs, 3) if report else 0.0,
        "residue_erased": bool(report and report.erased),
        "erase_due": iso(report.erase_due) if report else None,
    }
