"""The terminal chat UI: ``picobot tui`` runs :func:`run_tui`."""

from __future__ import annotations

import asyncio
import logging
import sys
from contextlib import AsyncExitStack
from pathlib import Path

from picobot.channels.tui.app import PicoBotApp, run_chat
from picobot.channels.tui.backend import ChatBackend, LocalBackend, tui_identity
from picobot.config.settings import Settings
from picobot.errors import PicobotError
from picobot.logsetup import logging_to

__all__ = ["ChatBackend", "LocalBackend", "PicoBotApp", "log_file_path", "run_tui"]


def log_file_path(settings: Settings) -> Path:
    """Where the TUI logs: ``[logging] file``, else ``<data dir>/picobot.log``."""
    return (
        Path(settings.logging.file) if settings.logging.file else settings.data_dir / "picobot.log"
    )


async def _run(settings: Settings) -> int:
    # Imported here: the runtime pulls in the store and the model, which the UI module
    # itself (and its tests with a fake backend) does not need.
    from picobot.runtime import open_runtime

    async with AsyncExitStack() as stack:
        try:
            rt = await stack.enter_async_context(open_runtime(settings, warm_up=True))
        except PicobotError as exc:
            print(f"picobot tui: {exc}", file=sys.stderr)
            return 1
        backend = LocalBackend(
            rt.kernel,
            tui_identity(settings),
            rt.provider.model_name,
            chat_model=rt.provider,
            background_model=rt.background,
        )
        await run_chat(backend)
    return 0


def run_tui(settings: Settings) -> int:
    """Open the runtime and run the chat UI until the user quits; return the exit code.

    Logs go to a file while the UI owns the terminal. A PicobotError while starting up
    (broken database, missing model) is printed as one line on stderr and returns 1.
    """
    path = log_file_path(settings)
    try:
        with logging_to(path, settings):
            logging.getLogger(__name__).info("TUI starting; logging to %s", path)
            return asyncio.run(_run(settings))
    except OSError as exc:
        print(f"picobot tui: cannot write the log file {path}: {exc.strerror}", file=sys.stderr)
        return 1
