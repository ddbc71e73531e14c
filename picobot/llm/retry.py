"""When the remote providers try a request again, and how long they wait first."""

from __future__ import annotations

from dataclasses import dataclass

from picobot.backoff import Backoff

RETRY_STATUSES = frozenset({408, 409, 429})
"""Statuses below 500 worth another attempt (as the official SDKs treat them): a
request timeout, a conflict with a concurrent request, a rate limit."""

JITTER = 0.1
"""Delays are stretched by up to 10%, so clients that failed together spread out."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Up to ``max_retries`` retries, waiting ``backoff_base * 2**attempt`` (plus jitter)
    at most ``max_backoff``; the server's Retry-After is honoured up to ``max_backoff``."""

    max_retries: int = 3
    backoff_base: float = 0.5
    max_backoff: float = 20.0

    @property
    def backoff(self) -> Backoff:
        """The delays as the shared policy (a retry is rare: built when asked)."""
        return Backoff(
            base_secs=self.backoff_base,
            cap_secs=self.max_backoff,
            jitter=JITTER,
            retry_after_cap_secs=self.max_backoff,
        )

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt + 1`` (``attempt`` counts from 0)."""
        return self.backoff.delay(attempt + 1, retry_after)
