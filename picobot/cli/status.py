"""``picobot status [--json]``: the database, its contents and the last retention run.

Reads only: it creates no database and never migrates one; a schema that is not
current is reported (and warned about) instead of counted. Everything that needs an
operator (a failed, stale or never-run retention, purge residue waiting, a schema
behind or ahead) is a warning on stderr, and any warning makes it exit 4, so a cron job
or monitoring check notices. Store modules are imported inside the functions so
``picobot --help`` stays light.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from picobot.cli.common import EXIT_ATTENTION, EXIT_OK, iso, print_json, record_json, warn
from picobot.cli.connection_views import connections_json, describe_connections
from picobot.config.learning import LearningState, learning_state
from picobot.config.settings import Settings

if TYPE_CHECKING:
    from picobot.store.channels.channel_state import ConnectionRecord
    from picobot.store.migrations import SchemaState
    from picobot.store.task_runs import ErasureState, TaskRun

Described = tuple[list[str], list[str]]
"""What status says: the lines for stdout, and the warnings for stderr."""


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
    connections: list[ConnectionRecord] = field(default_factory=list)
    """The outbound connections as the server last recorded them."""


def run_status(args: argparse.Namespace, settings: Settings) -> int:
    """``picobot status [--json]``: database path and size, contents, last retention run.

    Warnings go to stderr (with ``--json`` also into the object); any warning exits 4.
    """
    path = settings.db_path
    url = settings.store.resolved_url()
    found: StoreStatus | SchemaState | None = None
    sizes: tuple[int, int | None] | None = None
    lines: list[str] = []
    warnings: list[str] = []
    if url:
        found, size = asyncio.run(read_postgres_status(settings))
        sizes = (size, None)
    elif path.is_file():
        found = asyncio.run(read_status(settings))
        # Read after the open/close above: close checkpoints, so the WAL shows 0 bytes
        # unless a running server has written since.
        wal = path.with_name(path.name + "-wal")
        sizes = (path.stat().st_size, wal.stat().st_size if wal.is_file() else 0)
    if found is not None:
        interval = settings.session.retention.cleanup_interval_secs
        if isinstance(found, StoreStatus):
            lines, warnings = describe_status(found, interval, time.time())
        else:
            lines, warnings = describe_schema(found)
    if not args.json:
        print(f"data directory: {settings.data_location.describe()}")
    where = settings.database_label
    if args.json:
        engine = "postgresql" if url else "sqlite"
        print_json(status_json(where, sizes, found, settings, warnings, engine))
    elif sizes is None:
        print(f"database: {where} (not created yet)")
    else:
        size, wal_size = sizes
        print(f"database: {where}")
        wal_note = "" if wal_size is None else f" (WAL {human_bytes(wal_size)})"
        print(f"size: {human_bytes(size)}{wal_note}")
        for line in lines:
            print(line)
    if not args.json:
        print(f"learning: {_learning(settings).describe()}")
    for warning in warnings:
        warn(warning)
    return EXIT_ATTENTION if warnings else EXIT_OK


async def read_postgres_status(settings: Settings) -> tuple[StoreStatus | SchemaState, int]:
    """The status of a PostgreSQL store, and the database's size in bytes (its own
    files, indexes and TOAST included)."""
    from picobot.runtime import open_database
    from picobot.store.postgres.engine import database_size

    async with open_database(settings, schema="as_is") as db:
        size = await database_size(db)
    return await read_status(settings), size


async def read_status(settings: Settings) -> StoreStatus | SchemaState:
    """The status, or only the schema state when the schema is not current.

    The file is left as it is (status never migrates), and an older schema may lack
    the tables that are counted.
    """
    from picobot.runtime import open_database
    from picobot.store.channels.channel_state import ChannelState
    from picobot.store.migrations import schema_state
    from picobot.store.overview import status_counts
    from picobot.store.task_runs import TASK_NAME, erasure_state, last_run

    async with open_database(settings, schema="as_is") as db:
        schema = await schema_state(db)
        if schema.behind or schema.ahead:
            return schema
        counts = await db.read(status_counts)
        return StoreStatus(
            schema_version=schema.current,
            known_version=schema.known,
            sessions=counts.sessions,
            messages=counts.messages,
            memories=counts.memories,
            queued_for_index=counts.queued_for_index,
            retention=await last_run(db, TASK_NAME),
            erasure=await erasure_state(db, settings.session.retention.erase_interval_secs),
            connections=await ChannelState(db).connections(),
        )


def describe_schema(schema: SchemaState) -> Described:
    """What ``status`` says after the path and size about a schema that is not current."""
    lines = [f"schema version: {schema.current} of {schema.known}"]
    if schema.ahead:
        return lines, ["a newer PicoBot has upgraded this database; upgrade PicoBot"]
    return lines, [
        f"{schema.known - schema.current} migration(s) pending; run `picobot migrate` to"
        " upgrade the database (status does not), then status shows its contents"
    ]


def describe_status(status: StoreStatus, interval_secs: float, now: float) -> Described:
    """What ``status`` says after the path and size about a current database."""
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
    connection_lines, connection_warnings = describe_connections(status.connections)
    lines += connection_lines
    run = status.retention
    # The purge warning comes first: a purge that failed before retention ever ran is
    # the case an operator most needs to hear about.
    warnings = _purge_residue(status.erasure) + connection_warnings
    if run is None or run.last_started_at is None:
        lines.append("retention: never run")
        lines += _residue_waiting(status.erasure)
        warnings.append("retention has never run; start the server or run `retention run`")
        return lines, warnings
    if run.last_finished_at is not None:
        outcome = f"ok, {run.result}" if run.ok else f"FAILED, {run.error}"
        lines.append(f"retention: last run {format_ts(run.last_finished_at)}, {outcome}")
    if run.unfinished:
        lines.append(f"retention: a run started {format_ts(run.last_started_at)} has not finished")
    lines += _residue_waiting(status.erasure)
    last = max(run.last_started_at, run.last_finished_at or 0.0)
    if run.ok is False:
        warnings.append("the last retention run failed; see the error above and the log")
    if now - last > 2 * interval_secs:
        warnings.append(
            f"retention last ran {human_duration(now - last)} ago, more than twice"
            f" its interval ({human_duration(interval_secs)}); is the server running?"
        )
    return lines, warnings


def format_status(status: StoreStatus, interval_secs: float, now: float) -> list[str]:
    """:func:`describe_status` as one text: the lines, then ``warning: ...`` lines."""
    lines, warnings = describe_status(status, interval_secs, now)
    return lines + [f"warning: {w}" for w in warnings]


def _residue_waiting(erasure: ErasureState | None) -> list[str]:
    """What ``status`` says about residue retention will erase later, if any."""
    from picobot.tasks.retention import format_ts

    if erasure is None or erasure.waiting_since is None or erasure.due is None:
        return []
    return [
        f"retention: rows deleted since {format_ts(erasure.waiting_since)} leave residue"
        f" until the first run from {format_ts(erasure.due)} erases it"
    ]


def _purge_residue(erasure: ErasureState | None) -> list[str]:
    """The warning about a purge whose erasure did not finish, if any."""
    from picobot.tasks.retention import format_ts

    if erasure is None or erasure.purge_residue_since is None:
        return []
    return [
        f"a purge started {format_ts(erasure.purge_residue_since)} has not erased what it"
        " deleted (it failed, was cut short or is still running); the next retention run"
        " erases it"
    ]


def status_json(
    path: Path | str,
    sizes: tuple[int, int | None] | None,
    found: StoreStatus | SchemaState | None,
    settings: Settings,
    warnings: list[str],
    engine: str = "sqlite",
) -> dict[str, Any]:
    """``status --json``: every key always present, null where it does not apply."""
    database = {
        "path": str(path),
        "engine": engine,
        "exists": sizes is not None,
        "size_bytes": sizes[0] if sizes else None,
        "wal_bytes": sizes[1] if sizes else None,
    }
    schema: dict[str, Any] | None = None
    contents: dict[str, int] | None = None
    retention: dict[str, Any] | None = None
    connections: list[dict[str, Any]] | None = None
    if isinstance(found, StoreStatus):
        connections = connections_json(found.connections)
        schema = {"version": found.schema_version, "known": found.known_version}
        contents = {
            "sessions": found.sessions,
            "messages": found.messages,
            "memories": found.memories,
            "queued_for_index": found.queued_for_index,
        }
        retention = _retention_json(found.retention, found.erasure, settings)
    elif found is not None:
        schema = {"version": found.current, "known": found.known}
    if schema is not None:
        known, version = schema["known"], schema["version"]
        schema["state"] = (
            "current" if version == known else "behind" if version < known else "ahead"
        )
    learning = _learning(settings)
    return {
        "learning": {"on": learning.on, "model": learning.model, "reason": learning.reason},
        "database": database,
        "schema": schema,
        "contents": contents,
        "retention": retention,
        "connections": connections,
        "warnings": warnings,
    }


def _retention_json(
    run: TaskRun | None, erasure: ErasureState | None, settings: Settings
) -> dict[str, Any]:
    last: dict[str, Any] | None = None
    if run is not None and run.last_started_at is not None:
        times = ("last_started_at", "last_finished_at")
        last = record_json(run, times=times, drop=("name",)) | {"unfinished": run.unfinished}
    return {
        "interval_secs": settings.session.retention.cleanup_interval_secs,
        "last_run": last,
        "residue_waiting_since": iso(erasure.waiting_since) if erasure else None,
        "erase_due": iso(erasure.due) if erasure else None,
        "purge_residue_since": iso(erasure.purge_residue_since) if erasure else None,
    }


def _learning(settings: Settings) -> LearningState:
    """Whether the bot learns by itself, and with which model, as configured."""
    return learning_state(settings.memory.learning, settings.llm)


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
