"""Pending forgets: the MCP side of the chat's two-step confirmation.

A first ``forget`` call returns a plan and a token; only a second call with that token,
by the same user, before it expires, deletes anything. Tokens are single use: taken
(and dropped) by the first answer that names them, whatever its outcome.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from picobot.errors import UserError

MAX_PENDING = 1000
"""Plans kept at once over all users; the oldest go first (they only cost a new ask)."""


@dataclass(frozen=True, slots=True)
class ForgetPlan:
    """What a confirmed forget deletes: one note (by key) or one learned fact (by id)."""

    kind: Literal["note", "fact"]
    target: str
    summary: str
    """What the user is asked to confirm, with the counts."""


@dataclass(frozen=True, slots=True)
class _Pending:
    user_id: str
    plan: ForgetPlan
    expires_at: float


class Confirmations:
    """Single-use, expiring tokens, each bound to the user it was issued to."""

    def __init__(self, timeout_secs: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_secs = timeout_secs
        self._clock = clock
        self._pending: OrderedDict[str, _Pending] = OrderedDict()

    def issue(self, user_id: str, plan: ForgetPlan) -> str:
        """A new token for ``plan``, valid for ``timeout_secs`` and for ``user_id`` only."""
        while len(self._pending) >= MAX_PENDING:
            self._pending.popitem(last=False)
        token = secrets.token_urlsafe(16)
        self._pending[token] = _Pending(user_id, plan, self._clock() + self.timeout_secs)
        return token

    def take(self, user_id: str, token: str) -> ForgetPlan:
        """The plan of ``token``, consumed; UserError if unknown, another user's or expired.

        Another user's token is answered exactly like an unknown one (and stays theirs),
        so a token reveals nothing to anyone but its owner.
        """
        pending = self._pending.get(token)
        if pending is None or pending.user_id != user_id:
            raise UserError(
                "There is no pending forget with that confirmation; nothing was deleted."
            )
        del self._pending[token]
        if self._clock() > pending.expires_at:
            raise UserError(
                "The confirmation expired; nothing was deleted. Call forget again for a new one."
            )
        return pending.plan
