"""Single-use, expiring tokens in memory: each stands for one value until it is taken.

Shared by the confirmations and downloads that hand a caller a secret to present once
(MCP's two-step forget, ``/export``'s download link). A restart voids every token.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Taken(Generic[T]):
    """What a token stood for, and whether it had expired when it was taken."""

    value: T
    expired: bool


class SingleUseTokens(Generic[T]):
    """Issue tokens for values; take each at most once, within ``ttl_secs``.

    At most ``max_pending`` are held: past that the oldest goes first (with one
    lifetime for all, the oldest is also the first to expire).
    """

    def __init__(
        self,
        ttl_secs: float,
        *,
        max_pending: int,
        token_bytes: int = 16,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_secs = ttl_secs
        self.clock = clock
        self._max = max_pending
        self._bytes = token_bytes
        self._pending: OrderedDict[str, tuple[T, float]] = OrderedDict()

    def issue(self, value: T) -> str:
        """A new token for ``value``, valid for ``ttl_secs``."""
        while len(self._pending) >= self._max:
            self._pending.popitem(last=False)
        token = secrets.token_urlsafe(self._bytes)
        self._pending[token] = (value, self.clock() + self.ttl_secs)
        return token

    def take(self, token: str, belongs: Callable[[T], bool] = lambda _: True) -> Taken[T] | None:
        """Consume ``token`` and return what it stood for; None when it is unknown, used,
        or its value fails ``belongs`` (then it stays, for the one it belongs to)."""
        found = self._pending.get(token)
        if found is None or not belongs(found[0]):
            return None
        del self._pending[token]
        value, expires_at = found
        return Taken(value, expired=self.clock() > expires_at)
