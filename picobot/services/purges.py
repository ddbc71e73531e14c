"""Purges as every front end asks for them: plan, confirm with the token, execute.

:class:`PurgeService` holds the one :class:`PrivacyController` of the runtime, so the
pending plans and their tokens (single use, expiring, bound to the requester) live in
one table of the store whichever door (or instance) asked: the chat's ``/purge``, the
admin API, the dashboard or the CLI. A confirmation that comes too late raises
:class:`PurgeExpired` (a UserError), anything else unknown a plain UserError, so a
front end can tell the two apart without keeping tokens of its own.
"""

from __future__ import annotations

from picobot.errors import UserError
from picobot.privacy.controller import PendingPurge, PrivacyController, PurgeResult
from picobot.privacy.scopes import Actor, PurgeScope, SessionScope
from picobot.store.conversation.messages import HoldCheck
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.erasure.purge import PurgeCounts, PurgeStore


class NoSuchSession(UserError):
    """A purge named a session that does not exist (a typo must not read as "nothing
    to delete")."""


class PurgeService:
    """The runtime's purges (see the module docstring)."""

    def __init__(self, controller: PrivacyController) -> None:
        self.controller = controller
        self._sessions = SessionRepo(controller.db)
        self._store = PurgeStore(controller.db)

    async def existing_session(self, session_id: str) -> SessionScope:
        """The scope of session ``session_id``; NoSuchSession if there is none."""
        if await self._sessions.get(session_id) is None:
            raise NoSuchSession(f"There is no session {session_id}.")
        return SessionScope(session_id)

    async def request(
        self, scope: PurgeScope, actor: Actor, origin: tuple[str, str] | None = None
    ) -> PendingPurge:
        """Plan a purge and hold it for a y/n answer from the same actor."""
        return await self.controller.request(scope, actor, origin)

    async def pending_for(
        self, actor: Actor, origin: tuple[str, str], answer: str
    ) -> PendingPurge | None:
        """The actor's pending purge asked from ``origin`` that ``answer`` answers."""
        return await self.controller.pending_for(actor, origin, answer)

    def awaits_answer(self, actor: Actor, origin: tuple[str, str]) -> HoldCheck:
        """The in-write check of whether :meth:`pending_for` may find a purge."""
        return self.controller.awaits_answer(actor, origin)

    async def confirm_pending(
        self, pending: PendingPurge, actor: Actor, answer: str
    ) -> PurgeResult | None:
        """Answer a pending purge found by :meth:`pending_for`, as :meth:`confirm` does."""
        return await self.controller.confirm_pending(pending, actor, answer)

    async def confirm(self, token: str, actor: Actor, answer: str) -> PurgeResult | None:
        """Answer a pending purge: y/yes executes it, anything else cancels it."""
        return await self.controller.confirm(token, actor, answer)

    async def still_stored(self, scope: PurgeScope, actor: Actor) -> PurgeCounts:
        """What ``scope`` holds now (after a purge of it: 0 when it worked)."""
        return (await self.controller.plan(scope, actor)).counts

    async def count_older(self, cutoff: float) -> PurgeCounts:
        """What a purge of conversation data older than ``cutoff`` would delete now."""
        return await self._store.count_older(cutoff)
