"""Sessions and their messages as operators browse them (admin API, dashboard), and
the branch ``/edit`` starts."""

from __future__ import annotations

from picobot.errors import UserError
from picobot.privacy.message_scope import NO_MESSAGE
from picobot.store.conversation.messages import MessagePage, MessageRepo
from picobot.store.conversation.sessions import ChatKey, SessionInfo, SessionPage, SessionRepo
from picobot.store.conversation.timeline import Timeline, session_timeline
from picobot.store.db import Database
from picobot.store.erasure.message_purge import id_at_seq, last_user_message, locate
from picobot.store.overview import SessionPreview, session_family, session_previews


class SessionService:
    """Listings, one session, its messages, its timeline and its forks; edit branches."""

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

    async def message_at(self, session_id: str, seq_order: int) -> int | None:
        """The id of ``session_id``'s message number ``seq_order`` ("#N"), or None."""
        return await id_at_seq(self._db, session_id, seq_order)

    async def last_user_message(self, session_id: str) -> int | None:
        """The id of ``session_id``'s last user message, or None."""
        return await last_user_message(self._db, session_id)

    async def branch_before(self, chat: ChatKey, session_id: str, message_id: int) -> str:
        """A new session forked from ``session_id`` just before ``message_id``, made the
        current one of ``chat`` (channel, chat id, user id); its id.

        Only a message the chat's user wrote in ``session_id``, a session of theirs: any
        other is a UserError in the same words whether it is missing or someone else's.
        The parent is left as it was (see :mod:`picobot.store.conversation.branches`).
        """
        channel, chat_id, user_id = chat
        found = await locate(self._db, message_id)
        info = None if found is None else await self._sessions.get(found[0])
        if found is None or info is None or info.user_id != user_id or found[2] != "user":
            raise UserError(NO_MESSAGE)
        where, seq, _ = found
        if where != session_id:
            raise UserError(
                f"Message {message_id} is not in this session; /resume {where} to edit it there."
            )
        return await self._sessions.create(
            channel, chat_id, user_id, parent_session_id=session_id, before_seq=seq
        )
