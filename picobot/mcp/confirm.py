"""Pending forgets: the MCP side of the chat's two-step confirmation.

A first ``forget`` call returns a plan and a token; only a second call with that token,
by the same user, before it expires, deletes anything. Tokens are single use: taken
(and dropped) by the first answer that names them, whatever its outcome.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from picobot.access.tokens import SingleUseTokens
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


class Confirmations:
    """Single-use, expiring tokens, each bound to the user it was issued to."""

    def __init__(self, timeout_secs: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_secs = timeout_secs
        self._tokens = SingleUseTokens[tuple[str, ForgetPlan]](
            timeout_secs, max_pending=MAX_PENDING, clock=clock
        )

    def issue(self, user_id: str, plan: ForgetPlan) -> str:
        """A new token for ``plan``, valid for ``timeout_secs`` and for ``user_id`` only."""
        return self._tokens.issue((user_id, plan))

    def take(self, user_id: str, token: str) -> ForgetPlan:
        """The plan of ``token``, consumed; UserError if unknown, another user's or expired.

        Another user's token is answered exactly like an unknown one (and stays theirs),
        so a token reveals nothing to anyone but its owner.
        """
        taken = self._tokens.take(token, lambda pending: pending[0] == user_id)
        if taken is None:
            raise UserError(
                "There is no pending forget with that confirmation; nothing was deleted."
            )
        if taken.expired:
            raise UserError(
                "The confirmation expired; nothing was deleted. Call forget again for a new one."
            )
        return taken.value[1]
