"""The ``picobot`` command line: one subcommand per operator task.

Every :class:`~picobot.errors.PicobotError` ends the command with a one-line
``picobot: error: ...`` message on stderr and a non-zero status (3 for configuration
errors, 1 otherwise; 2 is a usage error); only unexpected exceptions show a traceback.
The exit statuses are documented in docs/cli.md. Channel and store
modules are imported inside the subcommands that need them, so ``init`` and
``check-config`` work even where the heavier dependencies are missing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from picobot import __version__
from picobot.cli.backup import add_backup_commands
from picobot.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_CONFIG,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    Subcommands,
    fail,
    silence_stdout,
)
from picobot.cli.data import add_export_command
from picobot.cli.database import add_database_commands
from picobot.cli.facts import add_facts_command
from picobot.cli.memories import add_memories_command
from picobot.cli.ops import add_ops_commands
from picobot.cli.purge import add_purge_command
from picobot.cli.store import add_store_commands
from picobot.config.settings import DEFAULT_CONFIG_FILE, Settings, config_path, load_settings
from picobot.config.sources import REMOTE_KEY_ENV
from picobot.errors import ConfigError, PicobotError

Handler = Callable[[argparse.Namespace], int]


def _settings(args: argparse.Namespace) -> Settings:
    # `tui --key-env NAME` names a secret: a PICOBOT_* name there is not a mistyped setting.
    key_env = getattr(args, "key_env", None)
    return load_settings(args.config, secret_names=[key_env] if key_env else [])


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
    """Validate a config file alone, the PICOBOT_* environment on top of it, then the
    secrets the enabled parts need. What is fine goes to stdout, each problem to
    stderr; any problem exits 3 and prints no "ok".
    """
    from picobot.cli.check import run_check_config

    return run_check_config(config_path(args.file or args.config))


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
    from picobot.cli.operator import command_logging
    from picobot.cli.serve import serve

    settings = _settings(args)
    with command_logging(settings):
        return asyncio.run(serve(settings))


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve the local user's memory to an MCP client over stdin/stdout."""
    from picobot.cli.operator import command_logging
    from picobot.mcp import require_sdk

    require_sdk()
    from picobot.mcp.stdio import run_stdio

    settings = _settings(args)
    with command_logging(settings):
        return asyncio.run(run_stdio(settings))


def cmd_purge(args: argparse.Namespace) -> int:
    """Purge a session, a user's data, or data older than N days (operator)."""
    from picobot.cli.purge import run_purge

    return run_purge(args, _settings(args))


# --- parser and entry point -------------------------------------------------------------


class _Registry:
    """Adds subcommands to argparse and keeps them for the ``commands:`` help section.

    The section is written here rather than by argparse, whose formatter (before
    Python 3.13) measures subcommand names one indent shallower than it prints them, so
    a long name like ``check-config`` pushed its help onto a line of its own.
    """

    def __init__(self, subparsers: Subcommands) -> None:
        self._subparsers = subparsers
        self.parsers: dict[str, argparse.ArgumentParser] = {}

    def add_parser(
        self,
        name: str,
        *,
        help: str | None = None,
        description: str | None = None,
        parents: Sequence[argparse.ArgumentParser] = (),
    ) -> argparse.ArgumentParser:
        """Add subcommand ``name`` (``help`` is its line in ``picobot --help``)."""
        cmd = self._subparsers.add_parser(name, help=help, description=description, parents=parents)
        self.parsers[name] = cmd
        return cmd

    def help_section(self) -> str:
        """The ``commands:`` section: one aligned line per subcommand."""
        width = max(map(len, self.parsers)) + 2
        lines = [f"  {name.ljust(width)}{p.description}" for name, p in self.parsers.items()]
        hint = f"`{PROG} COMMAND --help` shows the options of one."
        return "commands:\n" + "\n".join(lines) + "\n\n" + hint


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand and its one-line help."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        # Spelled out: the suppressed subcommand argument would drop COMMAND from it.
        usage="%(prog)s [-h] [--version] [--config FILE] COMMAND ...",
        description="PicoBot: a self-hosted chat bot with memory and privacy controls.",
        # The commands section (the epilog) is laid out by _Registry.
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    config_help = "config file (default: $PICOBOT_CONFIG, else ./config.toml if present)"
    parser.add_argument("--config", metavar="FILE", help=config_help)
    # Also accepted after the subcommand; SUPPRESS keeps it from resetting the global value.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help=config_help)
    # prog: a subcommand's usage starts "picobot NAME", not with the usage spelled out above.
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", help=argparse.SUPPRESS, prog=PROG
    )
    sub = _Registry(commands)

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
        default=REMOTE_KEY_ENV,
        help=f"env var holding the WebSocket API key (default {REMOTE_KEY_ENV})",
    )
    add("serve", cmd_serve, "serve the WebSocket, webhook and admin API channels")
    add("mcp", cmd_mcp, "serve your memory to a local MCP client over stdio")
    add_database_commands(sub, parents=[common])
    add_purge_command(add, cmd_purge)
    add_export_command(sub, parents=[common])
    add_ops_commands(sub, parents=[common])
    add_memories_command(sub, parents=[common])
    add_facts_command(sub, parents=[common])
    add_backup_commands(sub, parents=[common])
    add_store_commands(sub, parents=[common])
    parser.epilog = sub.help_section()
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the process exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or EXIT_OK
        return EXIT_USAGE
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
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
