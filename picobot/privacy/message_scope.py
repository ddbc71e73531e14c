"""The purge scope of chosen messages of one session: undo, rewind, delete one message.

``/undo`` (the last exchange), ``/rewind N`` (everything after message N) and
``/delete N`` (one message of the user's own), and an operator's
``DELETE /api/v1/messages/{id}``, go through the same two-step
:class:`~picobot.privacy.controller.PrivacyController` exchange as any purge: the plan
counts what will go (the messages and everything derived from them, see
:mod:`picobot.store.erasure.message_purge`), its token is single use, expiring and bound
to the requester, and the deleted text is erased from the database file and its WAL.
The ids are resolved when the plan is made, so a confirmation deletes exactly what it
counted (a message written meanwhile stays).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from picobot.errors import AccessDenied, UserError
from picobot.privacy.scopes import PURGE_SCOPES, SCOPE_TYPES, Actor, Counted, PurgeScope, ScopeDeps
from picobot.store.db import Database
from picobot.store.erasure.message_purge import MessagePurge, last_exchange, locate
from picobot.store.erasure.purge import PurgeCounts


@dataclass(frozen=True, slots=True)
class MessagesScope:
    """Exactly these messages of session ``session_id`` and what was derived from them;
    ``what`` names them for people ("the last exchange", "message 12")."""

    session_id: str
    ids: tuple[int, ...] = field(repr=False)
    what: str
    kind: ClassVar[str] = "messages"

    def describe(self) -> str:
        """Human words for the scope."""
        return f"{self.what} of session {self.session_id}"


NO_MESSAGE = "There is no such message of yours."
"""The same words for "missing" and "not yours", so ids of others do not leak."""


async def undo_scope(db: Database, session_id: str) -> MessagesScope:
    """The last exchange of ``session_id``: its last user message and all after it."""
    ids = await last_exchange(db, session_id)
    if not ids:
        raise UserError("There is nothing to undo in this session.")
    return MessagesScope(session_id, tuple(ids), "the last exchange")


async def rewind_scope(db: Database, message_id: int) -> MessagesScope:
    """Everything after message ``message_id`` in its session."""
    found = await locate(db, message_id)
    if found is None:
        raise UserError(NO_MESSAGE)
    session_id, seq, _ = found
    ids = await MessagePurge(db).tail_after(session_id, seq)
    if not ids:
        raise UserError(f"Message {message_id} is the last one; there is nothing after it.")
    n = len(ids)
    return MessagesScope(
        session_id, tuple(ids), f"the {n} message{'' if n == 1 else 's'} after message {message_id}"
    )


async def message_scope(db: Database, message_id: int, *, own: bool) -> MessagesScope:
    """Message ``message_id`` alone; with ``own`` (a user's request) only one they wrote."""
    found = await locate(db, message_id)
    if found is None or (own and found[2] != "user"):
        raise UserError(NO_MESSAGE)
    return MessagesScope(found[0], (message_id,), f"message {message_id}")


def _purge(deps: ScopeDeps) -> MessagePurge:
    assert deps.messages is not None  # the controller always provides it
    return deps.messages


class _MessagesRules:
    async def allows(self, scope: PurgeScope, actor: Actor, deps: ScopeDeps) -> bool:
        assert isinstance(scope, MessagesScope)
        info = await deps.sessions.get(scope.session_id)
        # Same answer for "missing" and "not yours", so ids of others do not leak.
        if info is not None and info.user_id == actor.id:
            return True
        raise AccessDenied(NO_MESSAGE)

    async def count(self, scope: PurgeScope, deps: ScopeDeps) -> Counted:
        assert isinstance(scope, MessagesScope)
        return Counted(await _purge(deps).count(scope.session_id, scope.ids))

    async def delete(self, scope: PurgeScope, cutoff: float | None, deps: ScopeDeps) -> PurgeCounts:
        assert isinstance(scope, MessagesScope)
        return await _purge(deps).delete(scope.session_id, scope.ids)

    def owner(self, scope: PurgeScope) -> tuple[str | None, str | None]:
        assert isinstance(scope, MessagesScope)
        return None, scope.session_id


SCOPE_TYPES.add("messages", MessagesScope)
PURGE_SCOPES.add("messages", _MessagesRules())
