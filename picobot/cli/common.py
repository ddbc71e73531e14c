"""What every ``picobot`` subcommand module shares: exit statuses, messages on stderr,
``--json`` output and the type of the subcommand registry.

Its own module so that :mod:`picobot.cli.main` and the modules it imports its subcommands
from (``data``, ``database``, ``memories``, ``ops``, ``purge``) can all use it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any, Protocol

from picobot.config.settings import Settings, load_settings

EXIT_OK = 0
EXIT_ERROR = 1
"""The command could not do its job (nothing stored, refused, the store failed)."""
EXIT_USAGE = 2
"""The command line is wrong (argparse's own status for it)."""
EXIT_CONFIG = 3
"""The configuration (file or PICOBOT_* environment) is invalid."""
EXIT_ATTENTION = 4
"""``status`` ran and found something an operator must look at (warnings on stderr)."""
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a program whose reader went away."""
PROG = "picobot"


class Subcommands(Protocol):
    """What the CLI modules use of ``ArgumentParser.add_subparsers()``'s result.

    Typed by this protocol because argparse's class for it is private.
    """

    def add_parser(
        self,
        name: str,
        *,
        help: str | None = ...,
        description: str | None = ...,
        parents: Sequence[argparse.ArgumentParser] = ...,
    ) -> argparse.ArgumentParser:
        """Add and return the parser of subcommand ``name``."""
        ...


def fail(message: str) -> None:
    """Print ``picobot: error: <message>`` on stderr (the caller returns the status)."""
    print(f"{PROG}: error: {message}", file=sys.stderr)


def warn(message: str) -> None:
    """Print ``picobot: warning: <message>`` on stderr."""
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the ``--json`` switch (shapes documented in docs/cli.md)."""
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object on stdout (see docs/cli.md)"
    )


def print_json(value: dict[str, Any]) -> None:
    """Print ``value`` as one indented JSON object (UTF-8 text, keys in a fixed order)."""
    print(json.dumps(value, indent=2, ensure_ascii=False))


def iso(ts: float | None) -> str | None:
    """An epoch timestamp as ISO 8601 in UTC (as the admin API and exports write it)."""
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def with_settings(
    fn: Callable[[argparse.Namespace, Settings], int],
) -> Callable[[argparse.Namespace], int]:
    """A ``handler(args)`` that loads the settings (``--config``) and calls ``fn``."""

    def handler(args: argparse.Namespace) -> int:
        return fn(args, load_settings(getattr(args, "config", None)))

    return handler


def record_json(
    record: Any, *, times: Collection[str] = (), drop: Collection[str] = ()
) -> dict[str, Any]:
    """A dataclass instance as a JSON object: its fields in order, less ``drop``, with
    the epoch timestamps named in ``times`` as ISO 8601 UTC.

    One renderer for every record the CLI prints, so a field added to a record shows
    up in ``--json`` under its own name.
    """
    return {
        f.name: iso(getattr(record, f.name)) if f.name in times else getattr(record, f.name)
        for f in fields(record)
        if f.name not in drop
    }


def silence_stdout() -> None:
    """Point standard output at /dev/null after its reader went away.

    So that the interpreter's final flush of what is still buffered does not fail
    again with an "Exception ignored" message (the recipe in Python's ``signal`` docs).
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real descriptor behind stdout (tests, embedding)
        pass
    finally:
        os.close(devnull)
