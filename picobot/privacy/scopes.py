"""Purge scopes: what a purge deletes, and the registry the controller dispatches from.

A scope is a frozen dataclass naming what to delete (a session, a user, data older
than N days, chosen facts) with a ``kind`` (the label of its events and metrics) and
``describe()``. What a kind means is its :class:`ScopeRules` in :data:`PURGE_SCOPES`:
who besides an operator may purge it, how to count it, how to delete it, and whose
data it is (for the events). :class:`~picobot.privacy.controller.PrivacyController`
looks the rules up by ``kind``, so adding a scope is its module (the dataclass and
its rules) plus two registration lines, ``PURGE_SCOPES.add("kind", Rules())`` and
``SCOPE_TYPES.add("kind", Scope)`` (how a pending purge's stored scope is read back),
and an import of that module in :mod:`picobot.privacy.controller` (see
:mod:`picobot.privacy.fact_scope`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

from picobot.errors import AccessDenied, UserError
from picobot.registry import Registry
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.erasure.message_purge import MessagePurge
from picobot.store.erasure.purge import PurgeCounts, PurgeStore
from picobot.store.learned.fact_purge import FactPurge

DAY = 86400.0
MAX_PURGE_DAYS = 36_500
"""Largest N of an older-than-N-days purge (100 years); larger is a mistake, not a plan."""


class PurgeScope(Protocol):
    """What any purge scope is: a kind (its rules in :data:`PURGE_SCOPES`) and words."""

    @property
    def kind(self) -> str:
        """The name its rules are registered under; the label of its events."""

    def describe(self) -> str:
        """Human words for the scope."""


@dataclass(frozen=True, slots=True)
class Actor:
    """Who asks: a chat user (their authenticated user id) or an operator."""

    id: str
    operator: bool = False


@dataclass(frozen=True, slots=True)
class ScopeDeps:
    """What scope rules work with."""

    store: PurgeStore
    facts: FactPurge
    sessions: SessionRepo
    batch_size: int = 500
    clock: Callable[[], float] = time.time
    messages: MessagePurge | None = None
    """Chosen messages of a session (undo, rewind, delete one message)."""


@dataclass(frozen=True, slots=True)
class Counted:
    """What a scope holds now, and the cutoff the count used (older-than scopes)."""

    counts: PurgeCounts
    cutoff: float | None = None


class ScopeRules(Protocol):
    """What a kind of scope means to the controller."""

    async def allows(self, scope: PurgeScope, actor: Actor, deps: ScopeDeps) -> bool:
        """Whether a actor without operator rights may purge ``scope`` (raise
        AccessDenied to say why not)."""

    async def count(self, scope: PurgeScope, deps: ScopeDeps) -> Counted:
        """What a purge of ``scope`` would delete now (UserError for a bad scope)."""

    async def delete(self, scope: PurgeScope, cutoff: float | None, deps: ScopeDeps) -> PurgeCounts:
        """Delete what ``scope`` holds (``cutoff``: the one its plan counted)."""

    def owner(self, scope: PurgeScope) -> tuple[str | None, str | None]:
        """The (user id, session id) its events are recorded against."""


PURGE_SCOPES: Registry[ScopeRules] = Registry("purge scope")
SCOPE_TYPES: Registry[Callable[..., PurgeScope]] = Registry("purge scope")
"""Each kind's scope class, called with the scope's fields (a stored plan read back)."""


def rules_for(scope: PurgeScope) -> ScopeRules:
    """The rules of ``scope``'s kind."""
    return PURGE_SCOPES.get(scope.kind)


# --- session ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionScope:
    """One session and everything derived from it."""

    session_id: str
    kind: ClassVar[str] = "session"

    def describe(self) -> str:
        """Human words for the scope."""
        return f"session {self.session_id}"


class _SessionRules:
    async def allows(self, scope: PurgeScope, actor: Actor, deps: ScopeDeps) -> bool:
        assert isinstance(scope, SessionScope)
        info = await deps.sessions.get(scope.session_id)
        # Same answer for "missing" and "not yours", so ids of others do not leak.
        if info is not None and info.user_id == actor.id:
            return True
        raise AccessDenied(f"No session {scope.session_id} of yours.")

    async def count(self, scope: PurgeScope, deps: ScopeDeps) -> Counted:
        assert isinstance(scope, SessionScope)
        return Counted(await deps.store.count_session(scope.session_id))

    async def delete(self, scope: PurgeScope, cutoff: float | None, deps: ScopeDeps) -> PurgeCounts:
        assert isinstance(scope, SessionScope)
        return await deps.store.delete_session(scope.session_id)

    def owner(self, scope: PurgeScope) -> tuple[str | None, str | None]:
        assert isinstance(scope, SessionScope)
        return None, scope.session_id


SCOPE_TYPES.add("session", SessionScope)
PURGE_SCOPES.add("session", _SessionRules())


# --- user ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UserScope:
    """Every session, message, summary, memory and tool record of one user."""

    user_id: str
    kind: ClassVar[str] = "user"

    def describe(self) -> str:
        """Human words for the scope."""
        return f"all data of user {self.user_id}"


class _UserRules:
    async def allows(self, scope: PurgeScope, actor: Actor, deps: ScopeDeps) -> bool:
        assert isinstance(scope, UserScope)
        return scope.user_id == actor.id

    async def count(self, scope: PurgeScope, deps: ScopeDeps) -> Counted:
        assert isinstance(scope, UserScope)
        return Counted(await deps.store.count_user(scope.user_id))

    async def delete(self, scope: PurgeScope, cutoff: float | None, deps: ScopeDeps) -> PurgeCounts:
        assert isinstance(scope, UserScope)
        return await deps.store.delete_user(scope.user_id)

    def owner(self, scope: PurgeScope) -> tuple[str | None, str | None]:
        assert isinstance(scope, UserScope)
        return scope.user_id, None


SCOPE_TYPES.add("user", UserScope)
PURGE_SCOPES.add("user", _UserRules())


# --- older than N days -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OlderThanScope:
    """Conversation data older than a number of days (memories are kept)."""

    days: int
    kind: ClassVar[str] = "older_than"

    def describe(self) -> str:
        """Human words for the scope."""
        return f"conversation data older than {self.days} days"


class _OlderThanRules:
    async def allows(self, scope: PurgeScope, actor: Actor, deps: ScopeDeps) -> bool:
        return False  # everyone's data: operators only

    async def count(self, scope: PurgeScope, deps: ScopeDeps) -> Counted:
        assert isinstance(scope, OlderThanScope)
        if not 1 <= scope.days <= MAX_PURGE_DAYS:
            raise UserError(f"The number of days must be between 1 and {MAX_PURGE_DAYS}.")
        cutoff = deps.clock() - scope.days * DAY
        return Counted(await deps.store.count_older(cutoff), cutoff)

    async def delete(self, scope: PurgeScope, cutoff: float | None, deps: ScopeDeps) -> PurgeCounts:
        assert isinstance(scope, OlderThanScope)
        at = cutoff if cutoff is not None else deps.clock() - scope.days * DAY
        return await deps.store.delete_older(at, batch_size=deps.batch_size)

    def owner(self, scope: PurgeScope) -> tuple[str | None, str | None]:
        return None, None


SCOPE_TYPES.add("older_than", OlderThanScope)
PURGE_SCOPES.add("older_than", _OlderThanRules())
