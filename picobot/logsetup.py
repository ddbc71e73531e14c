"""Logging set-up shared by every entry point: one handler, secrets redacted.

Every record passes a :class:`RedactingFilter` on the handler, so an API key pasted into
a chat or an exception message never reaches a log file or the terminal.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from picobot.config import Settings
from picobot.privacy.redaction import RedactingFilter, Redactor

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@contextmanager
def logging_to(path: Path | None, settings: Settings) -> Iterator[logging.Handler]:
    """Send logging to ``path`` (None: stderr) at the configured level; restore after.

    Handlers already writing to the terminal are set aside meanwhile, because a UI may
    own the terminal.
    """
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.FileHandler(path, encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(RedactingFilter(Redactor.from_settings(settings.privacy)))
    root = logging.getLogger()
    saved_level = root.level
    terminal = [
        h
        for h in root.handlers
        if isinstance(h, logging.StreamHandler)
        and getattr(h, "stream", None) in (sys.stderr, sys.stdout)
    ]
    for h in terminal:
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(settings.logging.level)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        handler.close()
        for h in terminal:
            root.addHandler(h)
        root.setLevel(saved_level)
