"""Log lines that a client cannot forge or flood.

:func:`loggable` is the one way a value a request carried (a path, a header, a peer
name, a user agent, an id from a body) goes into a log line: control characters are
escaped, so ``/x%0a... purge executed: FORGED`` stays on the line it came with.

:class:`LogSummary` collapses a repeated event (failed logins of one peer, accept
errors) into its first line plus one summary line per interval with the count, so an
unauthenticated client cannot grow the log faster than one line per interval per key.
"""

from __future__ import annotations

import asyncio
import logging
import unicodedata
from dataclasses import dataclass

MAX_LOGGED_CHARS = 200
"""Longest request-derived value written to a log line; longer ones are cut."""

_LINE_BREAKING = {"\u2028", "\u2029", "\x85"}
# Control, format (bidi overrides), line/paragraph separators, and lone surrogates (what
# undecodable header bytes become; a UTF-8 log file could not even write them).
_ESCAPED = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def loggable(value: object, limit: int = MAX_LOGGED_CHARS) -> str:
    """``value`` as text safe for one log line: at most ``limit`` characters (then ``...``),
    control, format (bidi overrides), line-separator and surrogate characters written
    as ``\\xNN``/``\\uNNNN``, and a backslash doubled so an escape cannot be faked."""
    text = str(value)
    cut = len(text) > limit
    text = text[:limit]
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif char in _LINE_BREAKING or unicodedata.category(char) in _ESCAPED:
            out.append(_escape(char))
        else:
            out.append(char)
    return "".join(out) + ("..." if cut else "")


@dataclass(slots=True)
class _Window:
    suppressed: int
    handle: asyncio.TimerHandle | None


class LogSummary:
    """Log the first of a run of like events per key, then their count once per interval.

    ``note(key, msg, *args)`` logs ``msg % args`` at once when ``key`` has no open
    window, and opens one of ``interval_secs``; further notes of that key inside it are
    only counted, and when it ends one line says how many there were (nothing when there
    were none). At most ``max_keys`` windows are open; past that, events of new keys
    share one window (key ``"other"``), so a flood of keys costs bounded memory.
    :meth:`close` logs the pending counts and cancels the timers.
    """

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        interval_secs: float = 60.0,
        level: int = logging.WARNING,
        max_keys: int = 1024,
    ) -> None:
        self._log = logger
        self._what = what
        self._interval = interval_secs
        self._level = level
        self._max_keys = max_keys
        self._windows: dict[str, _Window] = {}

    def note(self, key: str, msg: str, *args: object, exc_info: bool = False) -> None:
        """Record one event of ``key``; ``msg % args`` is logged if its window is new
        (with the exception being handled if ``exc_info``)."""
        if key not in self._windows and len(self._windows) >= self._max_keys:
            key = "other"
        window = self._windows.get(key)
        if window is not None:
            window.suppressed += 1
            return
        self._log.log(self._level, msg, *args, exc_info=exc_info)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            handle = None  # no loop (a synchronous caller): the count is logged at close
        else:
            handle = loop.call_later(self._interval, self._end, key)
        self._windows[key] = _Window(0, handle)

    def _end(self, key: str) -> None:
        window = self._windows.pop(key, None)
        if window is not None and window.suppressed:
            self._log.log(
                self._level,
                "%s: %d more from %s in the last %gs",
                self._what,
                window.suppressed,
                loggable(key),
                self._interval,
            )

    def close(self) -> None:
        """Log the counts still pending and stop every timer."""
        for key, window in list(self._windows.items()):
            if window.handle is not None:
                window.handle.cancel()
            self._end(key)
