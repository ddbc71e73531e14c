"""Each user's privacy switches: ``/learning off|on`` and ``/recall off|on``.

Learning off: no facts are extracted from the user's messages, no reply markers are
learned and no reflections are made about them, from the next write on (the fact
writes check the switch in their own transaction), and what was said meanwhile is
never learned later. Recall off: the next prompt built for the user holds no recalled
records, learned facts or digests. Both are on until the user turns one off; the
switches are exported with the user's data and deleted by a user purge.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from picobot.store.conversation.preferences import Preferences, PreferenceStore, Switch


class PreferenceService:
    """Read and change a user's own switches."""

    def __init__(self, store: PreferenceStore, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self.clock = clock

    async def get(self, user_id: str) -> Preferences:
        """``user_id``'s switches (both on unless they turned one off)."""
        return await self._store.get(user_id)

    async def set(self, user_id: str, switch: Switch, on: bool) -> bool:
        """Turn ``switch`` on or off for ``user_id``; whether it changed."""
        return await self._store.set(user_id, switch, on, self.clock())
