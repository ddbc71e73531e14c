"""Sessions and their messages as operators browse them (admin API, dashboard)."""

from __future__ import annotations

from picobot.store.conversation.messages import MessagePage, MessageRepo
from picobot.store.conversation.sessions import SessionInfo, SessionPage, SessionRepo
from picobot.store.conversation.timeline import Timeline, session_timeline
from picobot.store.db import Database
from picobot.store.overview import SessionPreview, session_family, session_previews


class SessionService:
    """Listings, one session, its messages, its timeline and its forks."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._sessions = SessionRepo(db)
        self._messages = MessageRepo(db)

    async def get(self, session_id: str) -> SessionInfo | None:
        """Session ``session_id``, or None."""
        return await self._sessions.get(session_id)

    async def page(self, user_id: str | None, *, limit: int, offset: int) -> SessionPage:
        """Sessions (of ``user_id``, or everyone's), most recently active first."""
        return await self._sessions.page(user_id, limit=limit, offset=offset)

    async def messages_before(
        self, session_id: str, *, limit: int, before_seq: int | None
    ) -> MessagePage:
        """The ``limit`` messages of ``session_id`` just before ``before_seq``, oldest first."""
        return await self._messages.page_before(session_id, limit=limit, before_seq=before_seq)

    async def previews(
        self, *, user_id: str | None, text: str | None, limit: int, offset: int
    ) -> list[SessionPreview]:
        """Sessions with their first words, filtered by owner and by text."""
        return await self._db.read(
            lambda c: session_previews(c, user_id=user_id, text=text, limit=limit, offset=offset)
        )

    async def timeline(self, session_id: str) -> Timeline:
        """Everything that happened in ``session_id``, in order."""
        return await self._db.read(lambda c: session_timeline(c, session_id))

    async def family(self, session_id: str) -> tuple[list[str], list[str]]:
        """The sessions ``session_id`` was forked from, and those forked from it."""
        return await self._db.read(lambda c: session_family(c, session_id))
