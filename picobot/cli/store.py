"""``picobot store copy``: move the data directory's SQLite store to PostgreSQL.

The copying is :mod:`picobot.store.postgres.copy`; this module takes the target from
``--to`` or ``[store] url``/``url_env``, reports progress on stderr and the verified
result on stdout (text, or one JSON object with ``--json``). The target's URL is only
ever shown without its password.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING

from picobot.cli.common import (
    EXIT_OK,
    Subcommands,
    add_json_flag,
    print_json,
    with_settings,
)
from picobot.cli.database import positive_int
from picobot.config.settings import Settings
from picobot.config.store import SCHEMES
from picobot.errors import UserError

if TYPE_CHECKING:
    from picobot.store.postgres.copy import CopyReport


def add_store_commands(
    subparsers: Subcommands, *, parents: Sequence[argparse.ArgumentParser] = ()
) -> None:
    """Register ``store copy [--to URL] [--batch-rows N] [--json]``."""
    store_help = "move the store to another database"
    store = subparsers.add_parser("store", help=store_help, description=store_help, parents=parents)
    actions = store.add_subparsers(
        dest="store_action", metavar="ACTION", title="actions", required=True
    )
    copy_help = "copy the SQLite store to PostgreSQL, verified; run again to resume"
    copy = actions.add_parser("copy", help=copy_help, description=copy_help, parents=parents)
    copy.add_argument(
        "--to",
        metavar="URL",
        help="postgresql:// URL of the target database (default: [store] url or url_env);"
        " a password is better in PGPASSWORD or ~/.pgpass",
    )
    copy.add_argument(
        "--batch-rows",
        type=positive_int,
        metavar="N",
        help="rows per transaction (default 5000); a resumed copy restarts after the last",
    )
    add_json_flag(copy)
    copy.set_defaults(handler=with_settings(run_copy))


def target_url(args: argparse.Namespace, settings: Settings) -> str:
    """The URL to copy to: ``--to``, else the configured one. Raises UserError."""
    url = str(args.to or settings.store.resolved_url())
    if not url:
        raise UserError(
            "no target: give --to postgresql://USER@HOST/DB (or set [store] url or url_env)"
        )
    if url.split("://", 1)[0] not in SCHEMES:
        raise UserError("--to must be a postgresql:// URL")
    return url


def copy_json(report: CopyReport) -> dict[str, object]:
    """The ``store copy --json`` object."""
    return {
        "source": report.source,
        "target": report.target,
        "resumed": report.resumed,
        "user_keys": report.user_keys,
        "tables": [asdict(t) for t in report.tables],
        "rows": report.rows,
        "seconds": round(report.seconds, 3),
        "queued_for_index": report.queued,
    }


def run_copy(args: argparse.Namespace, settings: Settings) -> int:
    """Copy (or finish copying) the store and print the verified tables."""
    from picobot.store.postgres.connect import redacted
    from picobot.store.postgres.copy import BATCH_ROWS, StoreCopy

    url = target_url(args, settings)

    def progress(table: str, rows: int) -> None:
        print(f"copying {table}: {rows:,} rows", file=sys.stderr, flush=True)

    print(f"copying {settings.db_path} to {redacted(url)}", file=sys.stderr, flush=True)
    copier = StoreCopy(
        settings.db_path,
        url,
        key_settings=settings.keys,
        batch_rows=args.batch_rows or BATCH_ROWS,
        progress=progress,
    )
    report = asyncio.run(copier.run())
    if args.json:
        print_json(copy_json(report))
        return EXIT_OK
    width = max(len(t.name) for t in report.tables)
    print(f"copied {report.source} to {report.target}" + (" (resumed)" if report.resumed else ""))
    print(f"  {'user keys'.ljust(width)}  {report.user_keys:>9,}")
    for table in report.tables:
        print(f"  {table.name.ljust(width)}  {table.rows:>9,}")
    rate = report.rows / report.seconds if report.seconds > 0 else 0.0
    print(
        f"{report.rows:,} rows in {len(report.tables)} tables, {report.seconds:.1f} s"
        f" ({rate:,.0f} rows/s); counts and checksums match"
    )
    print(f"recall index: {report.queued:,} records queued for the background indexer")
    return EXIT_OK
