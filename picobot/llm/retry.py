"""When the remote providers try a request again, and how long they wait first."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from time import time

RETRY_STATUSES = frozenset({408, 409, 429})
"""Statuses below 500 worth another attempt (as the official SDKs treat them): a
request timeout, a conflict with a concurrent request, a rate limit."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with a little jitter; the server's Retry-After wins, capped."""

    max_retries: int = 3
    backoff_base: float = 0.5
    max_backoff: float = 20.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt + 1`` (``attempt`` counts from 0)."""
        if retry_after is not None:
            return max(0.0, min(self.max_backoff, retry_after))
        base = min(self.max_backoff, self.backoff_base * 2.0**attempt)
        # Jitter spreads out clients that failed together so they do not retry in step.
        return min(self.max_backoff, base * random.uniform(1.0, 1.1))


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from ``retry-after-ms`` (OpenAI) or ``Retry-After`` (seconds or HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time())
    except (TypeError, ValueError):
        return None
