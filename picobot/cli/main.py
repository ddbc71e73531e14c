"""The ``picobot`` command line: one subcommand per operator task.

Every :class:`~picobot.errors.PicobotError` ends the command with a one-line
``picobot: error: ...`` message on stderr and a non-zero status (2 for configuration
errors, 1 otherwise); only unexpected exceptions show a traceback. Channel and store
modules are imported inside the subcommands that need them, so ``init`` and
``check-config`` work even where the heavier dependencies are missing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from picobot import __version__
from picobot.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_CONFIG,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    PROG,
    fail,
    silence_stdout,
)
from picobot.cli.data import add_export_command
from picobot.cli.memories import add_memories_command
from picobot.cli.ops import add_ops_commands
from picobot.cli.purge import add_purge_command
from picobot.config.settings import DEFAULT_CONFIG_FILE, Settings, config_path, load_settings
from picobot.errors import ConfigError, PicobotError

if TYPE_CHECKING:
    from picobot.store.sessions import SessionInfo


Handler = Callable[[argparse.Namespace], int]


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.config)


# --- init -----------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    """Write the commented default config file; refuse to overwrite without --force."""
    from picobot.config.reference import render_config

    target = Path(args.output or args.config or DEFAULT_CONFIG_FILE)
    text = render_config()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Exclusive create closes the gap between "does it exist?" and the write.
        with target.open("w" if args.force else "x", encoding="utf-8") as fh:
            fh.write(text)
    except FileExistsError:
        fail(f"{target} already exists; use --force to overwrite it")
        return EXIT_ERROR
    except OSError as exc:
        fail(f"cannot write {target}: {exc.strerror}")
        return EXIT_ERROR
    print(f"wrote {target}; edit it, then run `{PROG} check-config {target}`")
    return EXIT_OK


# --- check-config -----------------------------------------------------------------------


def cmd_check_config(args: argparse.Namespace) -> int:
    """Validate a config file alone, then the PICOBOT_* environment on top of it."""
    from picobot.config.settings import validate_environment, validate_file

    path = config_path(args.file or args.config)
    if path is None:
        print("no config file; defaults apply")
    else:
        problems = validate_file(path)
        if problems:
            for problem in problems:
                print(f"{path}: {problem}")
            return EXIT_CONFIG
        print(f"{path}: ok")
    problems = validate_environment(path)
    for problem in problems:
        print(f"environment: {problem}")
    return EXIT_CONFIG if problems else EXIT_OK


# --- tui ------------------------------------------------------------------------------


def cmd_tui(args: argparse.Namespace) -> int:
    """Start the terminal chat UI, here or attached to a running server."""
    if args.connect:
        from picobot.channels.tui.remote import run_remote_tui

        return run_remote_tui(args.connect, args.key_env, settings=_settings(args))
    settings = _settings(args)
    # The CLI is the only module that imports a channel, and only the one it starts.
    from picobot.channels.tui import run_tui

    return run_tui(settings)


def cmd_serve(args: argparse.Namespace) -> int:
    """Run every enabled channel and the background tasks until SIGINT/SIGTERM."""
    from picobot.cli.serve import serve
    from picobot.logsetup import logging_to

    settings = _settings(args)
    log_file = Path(settings.logging.file) if settings.logging.file else None
    with ExitStack() as stack:
        try:
            stack.enter_context(logging_to(log_file, settings))
        except OSError as exc:
            fail(f"cannot write the log file {log_file}: {exc.strerror or exc}")
            return EXIT_ERROR
        return asyncio.run(serve(settings))


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def format_sessions(rows: Sequence[SessionInfo]) -> list[str]:
    """Render sessions as aligned text columns (times in UTC), header first."""
    header = ("ID", "USER", "CHANNEL", "CREATED", "LAST ACTIVE", "MESSAGES")
    table = [header] + [
        (
            r.id,
            r.user_id,
            r.channel,
            _when(r.created_at),
            _when(r.last_active),
            str(r.message_count),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in table
    ]


async def _list_sessions(settings: Settings, user_id: str | None, limit: int) -> list[SessionInfo]:
    from picobot.runtime import open_database
    from picobot.store.sessions import SessionRepo

    # A listing must not upgrade the schema as a side effect: refused until `migrate`.
    async with open_database(settings, schema="current") as db:
        return await SessionRepo(db).list_sessions(user_id, limit)


def cmd_sessions(args: argparse.Namespace) -> int:
    """List sessions, most recently active first."""
    settings = _settings(args)
    if not settings.db_path.is_file():
        # Listing must not create an empty database as a side effect.
        print(f"no database at {settings.db_path}; no sessions yet")
        return EXIT_OK
    rows = asyncio.run(_list_sessions(settings, args.user, args.limit))
    if not rows:
        print(f"no sessions for {args.user}" if args.user else "no sessions")
        return EXIT_OK
    for line in format_sessions(rows):
        print(line)
    return EXIT_OK


async def _migrate(settings: Settings) -> tuple[list[tuple[int, str]], list[str], int]:
    """Apply pending migrations; return (all applied versions, applied now, known)."""
    from picobot.runtime import open_database
    from picobot.store.migrations import MIGRATIONS, applied_versions, apply_migrations

    async with open_database(settings, schema="as_is") as db:
        applied_now = await apply_migrations(db)
        return await applied_versions(db), applied_now, len(MIGRATIONS)


def cmd_migrate(args: argparse.Namespace) -> int:
    """Create or upgrade the database and report its schema versions."""
    settings = _settings(args)
    versions, applied_now, known = asyncio.run(_migrate(settings))
    print(f"database: {settings.db_path}")
    for version, name in versions:
        mark = "  (applied now)" if name in applied_now else ""
        print(f"  {version:>3}  {name}{mark}")
    current = max((v for v, _ in versions), default=0)
    state = "up to date" if not applied_now else f"applied {len(applied_now)} migration(s)"
    print(f"schema version: {current} of {known}; {state}")
    return EXIT_OK


def cmd_purge(args: argparse.Namespace) -> int:
    """Purge a session, a user's data, or data older than N days (operator)."""
    from picobot.cli.purge import run_purge

    return run_purge(args, _settings(args))


# --- parser and entry point -------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


class _Formatter(argparse.HelpFormatter):
    """Keeps each subcommand's help on the subcommand's line.

    argparse (before 3.13) measures subcommand names one indent level shallower than
    it prints them, so a long name like ``check-config`` pushed its help to a new line.
    """

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction) and action.help != argparse.SUPPRESS:
            subactions = action._get_subactions()
            longest = max((len(self._format_action_invocation(a)) for a in subactions), default=0)
            indent = self._current_indent + self._indent_increment
            self._action_max_length = max(self._action_max_length, longest + indent)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand and its one-line help."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="PicoBot: a self-hosted chat bot with memory and privacy controls.",
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    config_help = "config file (default: $PICOBOT_CONFIG, else ./config.toml if present)"
    parser.add_argument("--config", metavar="FILE", help=config_help)
    # Also accepted after the subcommand; SUPPRESS keeps it from resetting the global value.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help=config_help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    def add(name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text, description=help_text, parents=[common])
        cmd.set_defaults(handler=handler)
        return cmd

    init = add("init", cmd_init, "write a commented config.toml with every default")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="where to write (default: --config FILE, else ./config.toml)",
    )
    check = add("check-config", cmd_check_config, "validate a config file and PICOBOT_* env")
    check.add_argument("file", nargs="?", metavar="FILE", help="file to check (default: --config)")
    tui = add("tui", cmd_tui, "chat with the bot in the terminal")
    tui.add_argument(
        "--connect", metavar="URL", help="attach to a running server, e.g. ws://127.0.0.1:8765/ws"
    )
    tui.add_argument(
        "--key-env",
        metavar="NAME",
        default="PICOBOT_WS_KEY",
        help="env var holding the WebSocket API key (default PICOBOT_WS_KEY)",
    )
    add("serve", cmd_serve, "serve the WebSocket, webhook and admin API channels")
    sessions = add("sessions", cmd_sessions, "list sessions (id, user, channel, activity)")
    sessions.add_argument("--user", metavar="USER_ID", help="only this user's sessions")
    sessions.add_argument(
        "--limit", type=_positive_int, default=50, metavar="N", help="at most N (default 50)"
    )
    add("migrate", cmd_migrate, "create or upgrade the database schema")
    add_purge_command(add, cmd_purge)
    add_export_command(sub, parents=[common])
    add_ops_commands(sub, parents=[common])
    add_memories_command(sub, parents=[common])
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the process exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or EXIT_OK
        return EXIT_CONFIG
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_CONFIG
    try:
        return handler(args)
    except ConfigError as exc:
        fail(str(exc))
        return EXIT_CONFIG
    except PicobotError as exc:
        fail(str(exc) or type(exc).__name__)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader stopped early (``picobot export | head``): end quietly, as cat does.
        silence_stdout()
        return EXIT_BROKEN_PIPE
