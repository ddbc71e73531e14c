"""``/purge`` in every channel, and the y/n answer that confirms it.

``/purge session [ID]``, ``/purge user`` and ``/purge older DAYS`` plan a purge and
emit a CONFIRM_REQUEST stating the counts. In the messaging channels the same user's
next message in the same chat answers it (a "yes" in another chat, a group say, is
just chat); the TUI and WebSocket clients pass the token back explicitly
(``TOKEN_CHANNELS``), so there a chat message is never taken for the answer. Only
``y``/``yes`` confirms.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable

from picobot.errors import StoreUnavailable, UserError
from picobot.kernel.commands import CommandCall
from picobot.kernel.kernel import Interceptor, Kernel
from picobot.messages import Identity, Outbound, OutboundKind, error, notice
from picobot.privacy.controller import PurgeResult
from picobot.privacy.scopes import Actor, OlderThanScope, PurgeScope, SessionScope, UserScope
from picobot.services.purges import PurgeService
from picobot.store.conversation.messages import HoldCheck

USAGE = "Usage: /purge session [ID] | /purge user | /purge older DAYS"
CANCELLED = "Purge cancelled; nothing was deleted."
PURGE_FAILED = (
    "The purge could not finish: storage is unavailable right now. What it deleted stays"
    " deleted, and what that left on disk is erased automatically later. Send the same"
    " /purge command again to delete anything it did not get to."
)

TOKEN_CHANNELS = frozenset({"tui", "ws"})
"""Channels whose clients answer with the confirmation token (a dialog, a ``confirm``
frame), never with their next chat message."""

log = logging.getLogger(__name__)


def actor_of(identity: Identity) -> Actor:
    """A chat user acts with their authenticated user id and no operator rights."""
    return Actor(identity.user_id)


class PurgeCommands:
    """The chat side of the purges (:class:`PurgeService`)."""

    def __init__(self, purges: PurgeService) -> None:
        self._controller = purges

    def register(self, kernel: Kernel) -> None:
        """Add /purge, the pending-answer interceptor and the token confirmation."""
        kernel.commands.add("purge", "/purge session|user|older N", "delete your data", self.purge)
        kernel.interceptors.append(Interceptor(self.awaits, self.answer))
        kernel.confirmation = self.confirm

    async def purge(self, call: CommandCall) -> list[Outbound]:
        """Plan a purge and ask for confirmation."""
        scope = self._scope(call)
        ident = call.identity
        origin = (ident.channel, ident.chat_id)
        pending = await self._controller.request(scope, actor_of(ident), origin)
        if pending.plan.counts.total == 0:
            return [notice(pending.plan.prompt(), call.session_id)]
        return [
            Outbound(
                OutboundKind.CONFIRM_REQUEST,
                pending.plan.prompt(),
                session_id=call.session_id,
                token=pending.token,
            )
        ]

    def _scope(self, call: CommandCall) -> PurgeScope:
        # Any whitespace separates the scope from its argument (a tab, a line break).
        parts = call.args.split(None, 1)
        what = parts[0] if parts else ""
        rest = parts[1].strip() if len(parts) > 1 else ""
        if what == "session":
            sid = rest or call.session_id
            if not sid:
                raise UserError("There is no current session to purge.")
            return SessionScope(sid)
        if what == "user":
            if rest and rest != call.identity.user_id:
                raise UserError("You can only purge your own data.")
            return UserScope(call.identity.user_id)
        if what == "older":
            try:
                return OlderThanScope(int(rest))
            except ValueError:
                raise UserError(USAGE) from None
        raise UserError(USAGE)

    def awaits(self, identity: Identity) -> HoldCheck | None:
        """The in-write check of whether this user has a purge waiting in this chat
        (None where answers carry the token)."""
        if identity.channel in TOKEN_CHANNELS:
            return None
        origin = (identity.channel, identity.chat_id)
        return self._controller.awaits_answer(actor_of(identity), origin)

    async def answer(self, identity: Identity, text: str) -> list[Outbound] | None:
        """If this user has a purge waiting in this chat, their message is the answer."""
        if identity.channel in TOKEN_CHANNELS:
            return None
        actor = actor_of(identity)
        origin = (identity.channel, identity.chat_id)
        pending = await self._controller.pending_for(actor, origin, text)
        if pending is None:
            return None
        return await self._confirm(self._controller.confirm_pending(pending, actor, text), actor)

    async def confirm(self, identity: Identity, token: str, answer: str) -> list[Outbound]:
        """An explicit answer carrying the confirmation token."""
        actor = actor_of(identity)
        return await self._confirm(self._controller.confirm(token, actor, answer), actor)

    async def _confirm(
        self, answering: Awaitable[PurgeResult | None], actor: Actor
    ) -> list[Outbound]:
        try:
            result = await answering
        except StoreUnavailable:
            log.exception("purge by %s failed", actor.id)
            return [error(PURGE_FAILED, code="store_unavailable")]
        return [notice(CANCELLED if result is None else result.summary())]
