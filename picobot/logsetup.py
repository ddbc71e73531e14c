"""Logging set-up shared by every entry point: one handler, secrets redacted.

Every record passes a :class:`RedactingFilter` on the handler, so an API key pasted into
a chat or an exception message never reaches a log file or the terminal. aiohttp's
report of a malformed request (:class:`MalformedRequestFilter`) is cut to one line.
Libraries that log what users wrote at DEBUG (websockets every frame) stay at INFO
even when ``[logging] level`` is DEBUG: chat text has no place in a log file, which no
purge reaches.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiohttp.http_exceptions import HttpProcessingError

from picobot.config.settings import Settings
from picobot.privacy.redaction import RedactingFilter, Redactor

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class MalformedRequestFilter(logging.Filter):
    """aiohttp logs a request it cannot parse (a URL over 8 KB, a broken header) as an
    ERROR with a traceback that quotes the request's first bytes: any client, without
    a key, could fill the log with its own text (user ids, search words). Such a
    record becomes one WARNING line naming the error, without the request."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.msg, record.args = (
                "%s: rejected a malformed request (%s, HTTP %s)",
                (
                    record.getMessage(),
                    type(exc).__name__,
                    exc.code,
                ),
            )
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_AIOHTTP_SERVER = logging.getLogger("aiohttp.server")
CONTENT_LOGGERS = ("websockets",)
"""Loggers whose DEBUG records carry message text (frames). The store logs no SQL."""


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
    quieted = {name: logging.getLogger(name).level for name in CONTENT_LOGGERS}
    for name in CONTENT_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.INFO, root.level))
    malformed = MalformedRequestFilter()
    _AIOHTTP_SERVER.addFilter(malformed)
    try:
        yield handler
    finally:
        _AIOHTTP_SERVER.removeFilter(malformed)
        root.removeHandler(handler)
        handler.close()
        for h in terminal:
            root.addHandler(h)
        root.setLevel(saved_level)
        for name, level in quieted.items():
            logging.getLogger(name).setLevel(level)
