"""How long to wait before trying again: one backoff policy and one Retry-After parser.

Every retry in PicoBot waits by :class:`Backoff`: model calls (``picobot.llm``),
webhook reply deliveries (``picobot.channels.webhook``) and sessions the summarizer
holds back (:class:`FailureBackoff`). A server's ``Retry-After`` is read by
:func:`retry_after_secs` / :func:`parse_retry_after` only, so a model server and a
messaging platform are understood the same way.

Lives at the bottom floor (it imports nothing of PicoBot) because the LLM providers,
the channels and the background tasks all use it.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import parsedate_to_datetime

MAX_RETRY_AFTER_SECS = 3600.0
"""How long a server's Retry-After is honoured by default (a policy may cap it lower)."""
RETRY_AFTER_CEILING_SECS = 86_400.0
"""A Retry-After of more than a day is read as a day: every policy caps it lower anyway,
and a finite value keeps ``now + delay`` a usable time."""
MAX_TRACKED = 10_000
"""Failing keys a :class:`FailureBackoff` remembers at once; the oldest is forgotten first."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff: ``base * factor**(n-1)`` after the n-th failure in a row,
    at most ``cap``; with ``jitter`` > 0 the delay is stretched by a random factor in
    ``[1, 1 + jitter]`` (still at most ``cap``), so clients that failed together do
    not retry in step.

    A server's Retry-After is a floor: the wait is never shorter than what it asked
    (honoured up to ``retry_after_cap_secs``) nor than the backoff itself.
    """

    base_secs: float
    cap_secs: float
    factor: float = 2.0
    jitter: float = 0.0
    retry_after_cap_secs: float = MAX_RETRY_AFTER_SECS

    def __post_init__(self) -> None:
        if self.base_secs < 0 or self.cap_secs < 0 or self.retry_after_cap_secs < 0:
            raise ValueError("backoff delays cannot be negative")
        if self.factor < 1 or self.jitter < 0:
            raise ValueError("a backoff factor is at least 1 and its jitter at least 0")

    def delay(self, failures: int, retry_after: float | None = None) -> float:
        """Seconds to wait after ``failures`` (>= 1) failed attempts in a row."""
        try:
            grown = self.base_secs * self.factor ** max(0, failures - 1)
        except OverflowError:
            # Thousands of failures in a row: far past the cap anyway.
            grown = math.inf
        delay = min(self.cap_secs, grown)
        if self.jitter:
            delay = min(self.cap_secs, delay * random.uniform(1.0, 1.0 + self.jitter))
        if retry_after is not None:
            delay = max(delay, min(max(0.0, retry_after), self.retry_after_cap_secs))
        return delay


def retry_after_secs(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After value: delay-seconds or an HTTP date.

    None when the value is absent or unreadable (the caller's own backoff applies);
    a negative number or a date in the past is 0; a fractional number is accepted
    (some servers send one); anything over a day is read as a day.
    """
    if value is None or not value.strip():
        return None
    seconds = _number(value)
    if seconds is None:
        seconds = _seconds_until(value.strip(), time.time() if now is None else now)
    return None if seconds is None else _bounded(seconds)


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from response headers: ``retry-after-ms`` (OpenAI's, in
    milliseconds) if it is a number, else ``Retry-After`` (:func:`retry_after_secs`)."""
    millis = _number(headers.get("retry-after-ms") or "")
    if millis is not None:
        return _bounded(millis / 1000)
    return retry_after_secs(headers.get("Retry-After"), now=now)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def _bounded(seconds: float) -> float:
    return min(RETRY_AFTER_CEILING_SECS, max(0.0, seconds))


def _seconds_until(http_date: str, now: float) -> float | None:
    try:
        when = parsedate_to_datetime(http_date)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        # HTTP dates are always GMT; "-0000" parses without a zone.
        when = when.replace(tzinfo=UTC)
    return when.timestamp() - now


@dataclass(slots=True)
class FailureBackoff:
    """Keys (sessions) that failed, each held back by ``policy`` after each failure in
    a row: work that keeps failing is tried later and later, not on every check.

    The summarizer uses it per session: one whose summary the model refuses every time
    (a content filter, say) would otherwise go to the model on every check, at the
    front of the queue, ahead of sessions that could be summarized. Kept in memory: a
    restart tries them all again.
    """

    policy: Backoff = field(default_factory=lambda: Backoff(base_secs=300.0, cap_secs=86_400.0))
    _failed: dict[str, tuple[int, float]] = field(default_factory=dict)

    def held(self, key: str, now: float) -> bool:
        """Whether ``key`` failed recently and should not be tried before its time."""
        entry = self._failed.get(key)
        return entry is not None and now < entry[1]

    def all_held(self, now: float) -> set[str]:
        """Every key held back at ``now``."""
        return {key for key, (_, until) in self._failed.items() if now < until}

    def failed(self, key: str, now: float) -> float:
        """Record a failure of ``key``; return the seconds until it may be tried again."""
        count = self._failed.pop(key, (0, 0.0))[0] + 1
        delay = self.policy.delay(count)
        self._failed[key] = (count, now + delay)
        if len(self._failed) > MAX_TRACKED:
            del self._failed[next(iter(self._failed))]
        return delay

    def succeeded(self, key: str) -> None:
        """``key`` worked: no longer held back."""
        self._failed.pop(key, None)
