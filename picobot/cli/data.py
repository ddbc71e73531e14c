"""``picobot export``: write everything stored about one user to a file or stdout.

Kept out of :mod:`picobot.cli.main` so the data commands can grow without the entry module
growing with them; ``cli.build_parser`` registers them with :func:`add_export_command`.
With ``-o FILE`` the export is written to a temporary file in the same directory and
renamed over ``FILE`` only when complete, so a failed or interrupted export never
leaves a half-written file (and never damages an earlier export of the same name).
The temporary file holds personal data, so it is removed on every way out: an error,
Ctrl+C, SIGTERM or SIGHUP (the process then exits with 128 + the signal number). Only
SIGKILL or a crash of the machine can leave one (``.FILE.<pid>.<random>.tmp``), and
the next export to the same file removes those whose process is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, TextIO

from picobot.cli.common import EXIT_ERROR, EXIT_OK, Subcommands, fail
from picobot.config.settings import Settings, load_settings

if TYPE_CHECKING:
    from picobot.privacy.export import ExportFormat
    from picobot.store.erasure.export import ExportStats


class ProgressBar:
    """A one-line progress bar redrawn in place on a terminal stream.

    Redraws only when the whole percentage changes, so a million-message export
    writes about a hundred updates, not a million.
    """

    def __init__(self, stream: TextIO, *, width: int = 30, label: str = "exporting") -> None:
        self._stream = stream
        self._width = width
        self._label = label
        self._shown: tuple[int, int] | None = None

    def __call__(self, done: int, total: int) -> None:
        """Show ``done`` of ``total`` messages."""
        percent = 100 if total <= 0 else min(100, done * 100 // total)
        if self._shown == (percent, total) and done != total:
            return
        self._shown = (percent, total)
        filled = self._width * percent // 100
        bar = "#" * filled + "-" * (self._width - filled)
        self._stream.write(f"\r{self._label} [{bar}] {percent:3d}% {done}/{total} messages")
        self._stream.flush()

    def finish(self) -> None:
        """End the bar's line so later output starts on a fresh one."""
        if self._shown is not None:
            self._stream.write("\n")
            self._stream.flush()
            self._shown = None


TERMINATING_SIGNALS = tuple(
    s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None
)
"""Signals that end an export; SIGINT is Python's KeyboardInterrupt already."""
_unfinished: set[Path] = set()
"""Temporary export files being written by this process (removed on a signal)."""
# What mkstemp puts between prefix and suffix: "<pid>.<random>", or "<random>" alone
# in files of versions that did not record the pid.
_TEMP_MIDDLE = re.compile(r"(?:(?P<pid>[0-9]+)\.)?[a-z0-9_]{8}")


def _temp_prefix(target: Path) -> str:
    return f".{target.name}."


@contextmanager
def atomic_output(target: Path) -> Iterator[IO[str]]:
    """A text file that replaces ``target`` only if the block completes.

    The temporary file is created next to ``target`` (a rename within one file system
    is atomic) with mode 0600, which the finished export keeps: it holds personal data.
    Its name carries our pid, so a later export can tell a leftover (see
    :func:`sweep_stale_temps`); until the block ends, :func:`removed_on_signals`
    removes it when the process is told to terminate.
    """
    prefix = f"{_temp_prefix(target)}{os.getpid()}."
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=prefix, suffix=".tmp")
    tmp = Path(tmp_name)
    _unfinished.add(tmp)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(target)
    except BaseException:
        with suppress(OSError):
            tmp.unlink()
        raise
    finally:
        _unfinished.discard(tmp)


def sweep_stale_temps(target: Path) -> int:
    """Remove temporary files that exports to ``target`` left behind; return how many.

    One is stale when the process named in it is gone (or, in a name without a pid,
    always): only SIGKILL or a power cut leaves one, and it holds personal data.
    A file of an export still running elsewhere is left alone.
    """
    prefix = _temp_prefix(target)
    removed = 0
    with suppress(OSError):
        for path in target.parent.iterdir():
            name = path.name
            if not (name.startswith(prefix) and name.endswith(".tmp")):
                continue
            match = _TEMP_MIDDLE.fullmatch(name[len(prefix) : -len(".tmp")])
            if match is None or (match["pid"] and _alive(int(match["pid"]))):
                continue
            with suppress(FileNotFoundError):
                path.unlink()
                removed += 1
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, owned by someone else
    return True


def _terminate(signum: int, _frame: FrameType | None) -> None:
    # Removed here rather than left to the unwinding: whatever runs when the signal
    # comes (a blocked write, the event loop), the file is gone before anything else.
    for path in list(_unfinished):
        with suppress(OSError):
            path.unlink()
    raise SystemExit(128 + signum)


@contextmanager
def removed_on_signals() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP remove unfinished export files first,
    then end the process with status 128 + the signal number (as a shell reports it)."""
    previous = {s: signal.signal(s, _terminate) for s in TERMINATING_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


async def _export(
    settings: Settings,
    user_id: str,
    fmt: ExportFormat,
    target: Path | None,
    progress: ProgressBar | None,
) -> ExportStats | None:
    """Run the export; None (and nothing written) when nothing is stored for the user."""
    from picobot.runtime import build_services, open_database

    # Reading only: an outdated schema is refused, not upgraded as a side effect.
    async with open_database(settings, schema="current") as db:
        export = build_services(settings, db).export
        # Checked before any output exists, so an unknown user leaves no empty file.
        if (await export.count(user_id)).empty:
            return None
        if target is None:
            return await export.write(user_id, sys.stdout, fmt=fmt, progress=progress)
        with atomic_output(target) as out:
            return await export.write(user_id, out, fmt=fmt, progress=progress)


def _describe(stats: ExportStats) -> str:
    webhook = stats.webhook_messages or stats.outbound_replies
    return (
        f"{stats.sessions} sessions, {stats.messages} messages, {stats.memories} memories,"
        f" {stats.summaries} summaries, {stats.tool_records} tool records"
        + (
            f", {stats.webhook_messages} webhook messages, {stats.outbound_replies} queued replies"
            if webhook
            else ""
        )
        + (f", {stats.facts} learned facts" if stats.facts else "")
    )


def run_export(args: argparse.Namespace, settings: Settings) -> int:
    """``picobot export``: the exit status (1 and a message for an unknown user)."""
    user_id: str = args.user
    if not settings.has_store:
        # Exporting must not create an empty database as a side effect.
        fail(f"no data stored for {user_id}")
        return EXIT_ERROR
    target = None if args.output in (None, "-") else Path(args.output)
    # Automatic only when the bar would not scribble over an export printed to the
    # same terminal.
    auto = sys.stderr.isatty() and (target is not None or not sys.stdout.isatty())
    bar = ProgressBar(sys.stderr) if args.progress or auto else None
    if target is not None:
        sweep_stale_temps(target)
    try:
        with removed_on_signals():
            stats = asyncio.run(_export(settings, user_id, args.format, target, bar))
    except OSError as exc:
        if target is None and isinstance(exc, BrokenPipeError):
            raise  # the reader of stdout went away: main() ends quietly
        fail(f"cannot write {target or 'to standard output'}: {exc.strerror or exc}")
        return EXIT_ERROR
    finally:
        if bar is not None:
            bar.finish()
    if stats is None:
        fail(f"no data stored for {user_id}")
        return EXIT_ERROR
    if target is not None:
        print(f"wrote {target}: {_describe(stats)}")
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    """The ``export`` handler: load the settings, then :func:`run_export`."""
    return run_export(args, load_settings(getattr(args, "config", None)))


def add_export_command(
    subparsers: Subcommands,
    *,
    parents: Sequence[argparse.ArgumentParser] = (),
) -> None:
    """Register ``export --user USER_ID [--format jsonl|markdown] [-o FILE] [--progress]``."""
    help_text = "export everything stored about a user (JSONL or Markdown)"
    cmd: argparse.ArgumentParser = subparsers.add_parser(
        "export", help=help_text, description=help_text, parents=parents
    )
    cmd.set_defaults(handler=cmd_export)
    cmd.add_argument("--user", required=True, metavar="USER_ID", help="whose data to export")
    cmd.add_argument(
        "--format",
        choices=("jsonl", "markdown"),
        default="jsonl",
        help="jsonl: one JSON record per line (default); markdown: readable document",
    )
    cmd.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write to FILE, replaced only when the export is complete (default: stdout)",
    )
    cmd.add_argument(
        "--progress",
        action="store_true",
        help="draw a progress bar on stderr even when it is not a terminal",
    )
