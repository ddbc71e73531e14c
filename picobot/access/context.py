"""ToolContext and permissions: who is acting, in which session, with which grants.

Scopes are ordered Session < User < Global. Session and User scopes are granted
automatically for the caller's own data; Global needs an explicit operator grant.
Anything not granted is denied.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum

from picobot.errors import AccessDenied

log = logging.getLogger(__name__)


class Scope(IntEnum):
    """How far a memory permission reaches."""

    SESSION = 1
    USER = 2
    GLOBAL = 3


class Action(StrEnum):
    """What a permission allows."""

    MEMORY_READ = "MemoryRead"
    MEMORY_WRITE = "MemoryWrite"


@dataclass(frozen=True, slots=True)
class Grant:
    """One permission: an action up to a scope, and where it came from."""

    action: Action
    scope: Scope
    source: str = "auto"


@functools.cache
def own_data_grants() -> frozenset[Grant]:
    """The grants every caller has on their own data (one shared, immutable set)."""
    return frozenset(
        Grant(action, scope)
        for action in (Action.MEMORY_READ, Action.MEMORY_WRITE)
        for scope in (Scope.SESSION, Scope.USER)
    )


@dataclass(frozen=True, slots=True)
class ToolContext:
    """The authenticated caller of a turn; every tool and memory access goes through it."""

    user_id: str
    session_id: str | None = None
    channel: str = ""
    grants: frozenset[Grant] = field(default_factory=own_data_grants)

    def _grant_for(self, action: Action, scope: Scope) -> Grant | None:
        matching = [g for g in self.grants if g.action == action and g.scope >= scope]
        # The narrowest grant is what really allows this; frozenset order is random.
        return min(matching, key=lambda g: (g.scope, g.source)) if matching else None

    def has(self, action: Action, scope: Scope) -> bool:
        """Whether a grant covers ``action`` at ``scope``, without logging (for probes)."""
        return self._grant_for(action, scope) is not None

    def allows(self, action: Action, scope: Scope) -> bool:
        """Whether a grant covers ``action`` at ``scope`` (deny by default); logged."""
        grant = self._grant_for(action, scope)
        if grant is None:
            log.info("permission %s{%s} for %s: denied", action, scope.name, self.user_id)
            return False
        log.debug(
            "permission %s{%s} for %s: granted (%s)", action, scope.name, self.user_id, grant.source
        )
        return True

    def require(self, action: Action, scope: Scope) -> None:
        """Raise AccessDenied unless allowed."""
        if not self.allows(action, scope):
            raise AccessDenied(f"Permission denied: {action.value}{{{scope.name.title()}}}.")
