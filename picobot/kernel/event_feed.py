"""A chat user's view of the event log: what happens in their current session.

Channels that let a client follow events (the WebSocket ``subscribe`` frame) read
through this, never the log itself: the session is the chat's current one, looked up
from the authenticated identity on every read, and only that user's events of it are
returned, so no client can follow another user's session.
"""

from __future__ import annotations

import functools

from picobot.messages import Identity
from picobot.store.conversation.events import Event, EventFilter, latest_event_id, list_events
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database

FEED_BATCH = 100
"""Most events one read returns (a follower reads again at once when it got that many)."""


class SessionEventFeed:
    """Events of an identity's current session, after a cursor."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._sessions = SessionRepo(db)

    async def start(self) -> int:
        """The cursor of a new follower: events stored from now on."""
        return await self._db.read(latest_event_id)

    async def after(self, identity: Identity, after_id: int) -> list[Event]:
        """The events of ``identity``'s current session with an id above ``after_id``
        (none while the chat has no session), oldest first, at most :data:`FEED_BATCH`."""
        sid = await self._sessions.current(identity.channel, identity.chat_id, identity.user_id)
        if sid is None:
            return []
        where = EventFilter(user_id=identity.user_id, session_id=sid, after_id=after_id)
        return await self._db.read(functools.partial(list_events, where=where, limit=FEED_BATCH))
