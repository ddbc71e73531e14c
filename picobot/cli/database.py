"""``picobot sessions`` and ``picobot migrate``: the database's sessions and schema.

``sessions`` only reads (no database is created, an outdated schema is refused);
``migrate`` creates or upgrades the file. Both print text, or one JSON object with
``--json`` (shapes in docs/cli.md). Store modules are imported inside the handlers so
``picobot --help`` stays light.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from picobot.cli.common import (
    EXIT_OK,
    Subcommands,
    add_json_flag,
    print_json,
    record_json,
    with_settings,
)
from picobot.config.settings import Settings

if TYPE_CHECKING:
    from picobot.store.conversation.sessions import SessionInfo


def add_database_commands(
    subparsers: Subcommands, *, parents: Sequence[argparse.ArgumentParser] = ()
) -> None:
    """Register ``sessions [--user ID] [--limit N] [--json]`` and ``migrate [--json]``."""
    sessions_help = "list sessions (id, user, channel, activity)"
    sessions = subparsers.add_parser(
        "sessions", help=sessions_help, description=sessions_help, parents=parents
    )
    sessions.set_defaults(handler=with_settings(run_sessions))
    sessions.add_argument("--user", metavar="USER_ID", help="only this user's sessions")
    sessions.add_argument(
        "--limit", type=positive_int, default=50, metavar="N", help="at most N (default 50)"
    )
    add_json_flag(sessions)
    migrate_help = "create or upgrade the database schema"
    migrate = subparsers.add_parser(
        "migrate", help=migrate_help, description=migrate_help, parents=parents
    )
    migrate.set_defaults(handler=with_settings(run_migrate))
    add_json_flag(migrate)


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


# --- sessions -----------------------------------------------------------------------------


def format_sessions(rows: Sequence[SessionInfo]) -> list[str]:
    """Render sessions as aligned text columns (times in UTC), header first."""
    from picobot.tasks.retention import format_ts

    header = ("ID", "USER", "CHANNEL", "CREATED", "LAST ACTIVE", "MESSAGES")
    table = [header] + [
        (
            r.id,
            r.user_id,
            r.channel,
            format_ts(r.created_at),
            format_ts(r.last_active),
            str(r.message_count),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in table
    ]


def session_json(info: SessionInfo) -> dict[str, Any]:
    """A session in ``sessions --json``: every field, times as ISO 8601 UTC."""
    return record_json(info, times=("created_at", "last_active"))


async def _list_sessions(settings: Settings, user_id: str | None, limit: int) -> list[SessionInfo]:
    from picobot.runtime import open_database
    from picobot.store.conversation.sessions import SessionRepo

    # A listing must not upgrade the schema as a side effect: refused until `migrate`.
    async with open_database(settings, schema="current") as db:
        return await SessionRepo(db).list_sessions(user_id, limit)


def run_sessions(args: argparse.Namespace, settings: Settings) -> int:
    """List sessions, most recently active first."""
    exists = settings.has_store
    # Listing must not create an empty database as a side effect.
    rows = asyncio.run(_list_sessions(settings, args.user, args.limit)) if exists else []
    if args.json:
        print_json({"sessions": [session_json(r) for r in rows]})
    elif not exists:
        print(f"no database at {settings.db_path}; no sessions yet")
    elif not rows:
        print(f"no sessions for {args.user}" if args.user else "no sessions")
    else:
        for line in format_sessions(rows):
            print(line)
    return EXIT_OK


# --- migrate ------------------------------------------------------------------------------


async def _migrate(settings: Settings) -> tuple[list[tuple[int, str]], list[str], int, int]:
    """Apply pending migrations, then seal what is stored in clear (resumable, in
    batches); return (all applied versions, applied now, known, rows sealed now)."""
    from picobot.runtime import open_database
    from picobot.store.erasure.erase import erase_residue
    from picobot.store.keys.backfill import seal_existing
    from picobot.store.keys.binding import bind_key_store
    from picobot.store.migrations import MIGRATIONS, applied_versions, apply_migrations

    def progress(column: str, rows: int) -> None:
        print(f"sealing {column}: {rows:,} rows", file=sys.stderr)

    async with open_database(settings, schema="as_is", keys_for_migrate=True) as db:
        applied_now = await apply_migrations(db)
        await bind_key_store(db)
        sealed = await seal_existing(db, progress=progress)
        if sealed:
            # The text in clear must not survive in free pages, the WAL or old index
            # segments (the index was rebuilt under keyed terms when the keys came).
            await erase_residue(db)
        return await applied_versions(db), applied_now, len(MIGRATIONS), sealed


def run_migrate(args: argparse.Namespace, settings: Settings) -> int:
    """Create or upgrade the database and report its schema versions."""
    versions, applied_now, known, sealed = asyncio.run(_migrate(settings))
    current = max((v for v, _ in versions), default=0)
    if args.json:
        print_json(
            {
                "database": settings.database_label,
                "schema_version": current,
                "known_version": known,
                "applied_now": applied_now,
                "sealed_now": sealed,
                "migrations": [
                    {"version": v, "name": name, "applied_now": name in applied_now}
                    for v, name in versions
                ],
            }
        )
        return EXIT_OK
    print(f"database: {settings.database_label}")
    for version, name in versions:
        mark = "  (applied now)" if name in applied_now else ""
        print(f"  {version:>3}  {name}{mark}")
    state = "up to date" if not applied_now else f"applied {len(applied_now)} migration(s)"
    print(f"schema version: {current} of {known}; {state}")
    if sealed:
        print(f"sealed {sealed:,} rows stored in clear with their users' keys")
    return EXIT_OK
