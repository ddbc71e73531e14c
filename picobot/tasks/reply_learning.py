"""Learning from ``[MEMORY:...]`` lines in the model's replies (the kernel's seam).

The kernel asks for a fresh :class:`MarkerFilter` per turn, streams the reply through
it, stores the visible text, and hands the observations here with the stored reply's
id. Storing them is one write through the fact lifecycle; no model call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from picobot.access.context import ToolContext
from picobot.errors import StoreUnavailable
from picobot.memory.markers import MarkerFilter
from picobot.store.conversation.messages import SessionGone
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore

log = logging.getLogger(__name__)


class ReplyLearner:
    """Turns a reply's marker lines into facts of the turn's authenticated user."""

    def __init__(self, store: FactStore, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock

    def filter(self) -> MarkerFilter:
        """A new filter for one reply."""
        return MarkerFilter()

    async def learn(self, ctx: ToolContext, found: Sequence[Observation], message_id: int) -> None:
        """Store ``found`` for ``ctx.user_id`` (never raises: the reply is sent anyway).

        The user id comes from the turn's ToolContext, never from the marker text.
        """
        if not found or ctx.session_id is None:
            return
        try:
            applied = await self._store.observe(
                ctx.user_id,
                found,
                session_id=ctx.session_id,
                message_id=message_id,
                now=self._clock(),
            )
        except SessionGone:
            return
        except StoreUnavailable:
            log.exception("could not store the learned facts of a reply")
            return
        log.info("learned %d facts from a reply in session %s", len(applied), ctx.session_id)
