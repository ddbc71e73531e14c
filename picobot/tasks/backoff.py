"""Work that keeps failing is tried again later and later, not on every check.

The summarizer uses :class:`FailureBackoff` per session: a session whose summary the
model refuses every time (a content filter, say) would otherwise be sent to the model
on every periodic check and after every turn, at the front of the queue, and with
enough of them the sessions that could be summarized would never get their turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_TRACKED = 10_000
"""Failing keys remembered at once; the oldest failure is forgotten first."""


@dataclass(slots=True)
class FailureBackoff:
    """Keys that failed, each held back ``base * 2**(n-1)`` seconds after its n-th
    failure in a row, at most ``cap``. Kept in memory: a restart tries them all again."""

    base_secs: float = 300.0
    cap_secs: float = 86_400.0
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
        delay = min(self.cap_secs, self.base_secs * 2.0 ** (count - 1))
        self._failed[key] = (count, now + delay)
        if len(self._failed) > MAX_TRACKED:
            del self._failed[next(iter(self._failed))]
        return delay

    def succeeded(self, key: str) -> None:
        """``key`` worked: no longer held back."""
        self._failed.pop(key, None)
