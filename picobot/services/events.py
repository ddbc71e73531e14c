"""Events: what happened (content-free rows), listed and followed by operators.

A chat client follows its own session's events through the kernel's
:class:`~picobot.kernel.event_feed.SessionEventFeed`."""

from __future__ import annotations

import builtins
import functools

from picobot.store.conversation.events import Event, EventFilter, latest_event_id, list_events
from picobot.store.db import Database
from picobot.store.overview import recent_events


class EventService:
    """Listings of events and the cursor where a live follower starts."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def list(self, where: EventFilter, limit: int) -> list[Event]:
        """Events matching ``where``, oldest first, at most ``limit``."""
        return await self._db.read(functools.partial(list_events, where=where, limit=limit))

    async def recent(self, limit: int) -> builtins.list[Event]:
        """The newest ``limit`` events, newest first."""
        return await self._db.read(lambda c: recent_events(c, limit))

    async def latest_id(self) -> int:
        """The id of the newest event (0 when there is none): where a live stream starts."""
        return await self._db.read(latest_event_id)
