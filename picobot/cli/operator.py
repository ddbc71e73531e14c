"""Who runs an operator command from the host, and where its actions are logged.

A purge, a retention run or a memory change made with ``picobot`` leaves a log line,
as the same action from a chat or the admin API does: scope, actor and counts, never
content. The CLI logs where ``picobot serve`` logs (``[logging] file``, else stderr),
so one file holds the trail of every way in when a file is configured.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from picobot.config.settings import Settings
from picobot.errors import PicobotError


def operator_id() -> str:
    """``cli:<user>``, the account this process runs as.

    Read from the system's user database by effective uid, not from ``$USER`` or
    ``$LOGNAME``, which anyone can set; without an entry (some containers) the uid.
    """
    uid = os.geteuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return f"cli:{name}"


def log_file(settings: Settings) -> Path | None:
    """Where ``serve`` and the operator commands log: ``[logging] file``, None for stderr."""
    return Path(settings.logging.file) if settings.logging.file else None


@contextmanager
def command_logging(settings: Settings) -> Iterator[None]:
    """Log to :func:`log_file` at the configured level while the block runs.

    Raises PicobotError naming the file when it cannot be opened: an action whose
    record cannot be written is not started.
    """
    from picobot.logsetup import logging_to

    path = log_file(settings)
    with ExitStack() as stack:
        try:
            stack.enter_context(logging_to(path, settings))
        except OSError as exc:
            raise PicobotError(f"cannot write the log file {path}: {exc.strerror or exc}") from None
        yield
