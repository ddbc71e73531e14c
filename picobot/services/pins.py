"""Message pins: a user keeps messages of their own past retention (``/pin``).

Every operation acts on the caller's own messages only: a number of someone else's is
answered like one that does not exist.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from picobot.store.learned.pins import PinnedMessage, PinStore


class PinService:
    """Pin, unpin and list a user's own messages."""

    def __init__(self, pins: PinStore, clock: Callable[[], float] = time.time) -> None:
        self._pins = pins
        self.clock = clock

    async def last_exchange(self, user_id: str, session_id: str) -> list[int]:
        """The ids of the last user message of ``session_id`` and the reply to it."""
        return await self._pins.last_exchange(user_id, session_id)

    async def set_pinned(self, user_id: str, ids: list[int], pinned: bool) -> list[int] | None:
        """Pin or unpin ``user_id``'s messages ``ids``: the ids that changed, or None when
        one of them is not theirs (nothing changed then)."""
        return await self._pins.set_pinned(user_id, ids, pinned, now=self.clock())

    async def list(self, user_id: str, limit: int) -> list[PinnedMessage]:
        """``user_id``'s pinned messages, at most ``limit``."""
        return await self._pins.list(user_id, limit)
