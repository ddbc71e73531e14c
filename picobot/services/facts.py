"""Learned facts as the front ends see them: list, show, create, change, pin, delete,
and learning from a session now.

One :class:`FactService` per runtime, over the fact store in force (the learning
task's when learning is on, so there is one writer of the lifecycle rules). Operator
edits (CLI, admin API, dashboard) are validated here first, then written by
:class:`FactStore` (which redacts and records each change with ``actor`` in the
fact's history), so bad input changes nothing and every front end applies one rule:
an unknown category or an empty text is refused (UserError, shown verbatim), a text
longer than 40 words is cut to 40, as extraction does. The chat commands act on the
caller's own facts only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from picobot.errors import UserError
from picobot.privacy.fact_scope import FactsScope, choose_facts
from picobot.store.db import Database
from picobot.store.learned.fact_rules import normalize_text, observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.learned.facts import (
    Fact,
    FactChange,
    FactFilter,
    FactSource,
    fact_detail,
    fact_history,
    fact_page,
    fact_sources,
    find_facts,
    get_fact,
)
from picobot.tasks.learning import LearningTask


@dataclass(frozen=True, slots=True)
class Reflected:
    """What ``/reflect`` did: messages read, facts new and confirmed, a reflection stored."""

    messages: int
    created: int
    reinforced: int
    stored: bool


class FactService:
    """Every operation on learned facts a front end offers (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        store: FactStore,
        learning: LearningTask | None = None,
        clock: Callable[[], float] = time.time,
        *,
        off_because: str = "",
    ) -> None:
        self._db = db
        self.store = store
        self.learning = learning
        self.clock = clock
        self.off_because = off_because
        """Why learning is off, when it is (``/reflect`` says it)."""

    # --- reads --------------------------------------------------------------------------

    async def find(self, where: FactFilter, limit: int | None) -> list[Fact]:
        """Facts ``where`` matches, most confident first, at most ``limit``."""
        return await self._db.read(lambda c: find_facts(c, where, limit))

    async def page(
        self, where: FactFilter, limit: int, before: int | None
    ) -> tuple[list[Fact], int | None]:
        """A page of facts, newest first, and the cursor of the next page."""
        return await self._db.read(lambda c: fact_page(c, where, limit, before))

    async def get(self, fact_id: int) -> Fact | None:
        """Fact ``fact_id``, or None."""
        return await self._db.read(lambda c: get_fact(c, fact_id))

    async def detail(self, fact_id: int) -> tuple[Fact, list[FactSource], list[FactChange]] | None:
        """The fact, its sources and its history (one snapshot), or None."""
        return await self._db.read(lambda c: fact_detail(c, fact_id))

    async def sources(self, fact_id: int) -> list[FactSource]:
        """Where fact ``fact_id`` was learned."""
        return await self._db.read(lambda c: fact_sources(c, fact_id))

    async def history(self, fact_id: int) -> list[FactChange]:
        """How fact ``fact_id`` changed, oldest first."""
        return await self._db.read(lambda c: fact_history(c, fact_id))

    async def choose(self, where: FactFilter) -> FactsScope:
        """The facts ``where`` matches now, as a purge scope (see :func:`choose_facts`)."""
        return await choose_facts(self._db, where)

    # --- an operator's edits ------------------------------------------------------------

    async def create(
        self,
        user_id: str,
        *,
        subject: str | None,
        category: str,
        text: str,
        confidence: float | None,
        actor: str,
    ) -> Fact:
        """A new fact of ``user_id`` made by ``actor`` (no session provenance)."""
        try:
            found = observation(subject, category, text)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        return await self.store.create(
            user_id, found, confidence=confidence, actor=actor, now=self.clock()
        )

    async def edit(
        self,
        fact_id: int,
        *,
        text: str | None = None,
        confidence: float | None = None,
        active: bool | None = None,
        pinned: bool | None = None,
        actor: str,
    ) -> Fact | None:
        """Change what is given of fact ``fact_id``; None if there is no such fact.

        A new confidence sets the active flag by the threshold unless ``active`` is
        given. A pin change is its own history row (``pinned``/``unpinned``).
        """
        if text is None and confidence is None and active is None and pinned is None:
            raise UserError("Nothing to change: give a text, confidence, active flag or pin.")
        if text is not None:
            try:
                text = normalize_text(text)
            except ValueError as exc:
                raise UserError(str(exc)) from None
        fact = await self.get(fact_id)
        if fact is None:
            return None
        now = self.clock()
        changed: Fact | None = fact
        if text is not None or confidence is not None or active is not None:
            changed = await self.store.update(
                fact_id, text=text, confidence=confidence, active=active, actor=actor, now=now
            )
        if changed is not None and pinned is not None:
            changed = await self.store.set_pinned(
                fact.user_id, fact_id, pinned, now=now, actor=actor
            )
        return changed

    async def delete(self, where: FactFilter, *, actor: str | None = None) -> int:
        """Delete the facts ``where`` matches (by ``actor``, or the user); how many."""
        return await self.store.delete(where, actor=actor, now=self.clock())

    # --- the caller's own facts ---------------------------------------------------------

    async def set_pinned(self, user_id: str, fact_id: int, pinned: bool) -> Fact | None:
        """Pin or unpin ``user_id``'s fact ``fact_id``; None if they have no such fact."""
        return await self.store.set_pinned(user_id, fact_id, pinned, now=self.clock())

    @property
    def learns(self) -> bool:
        """Whether learning is switched on."""
        return self.learning is not None and self.learning.enabled

    async def reflect(self, session_id: str) -> Reflected:
        """Learn from ``session_id``'s unread messages now, and store its reflection
        (the digests it completes are folded with it). UserError when learning is off
        or either step failed."""
        if self.learning is None or not self.learning.enabled:
            raise UserError("Learning is switched off on this server.")
        done = await self.learning.extract_session(session_id)
        reflected = await self.learning.reflections.reflect_session(session_id)
        if done.failed or reflected.failed:
            raise UserError("I could not reflect just now; please try again later.")
        return Reflected(
            max(done.messages, reflected.messages),
            done.created,
            done.reinforced,
            reflected.stored,
        )

    def session_ended(self, session_id: str | None) -> None:
        """A session was left (``/new``): reflect on it in the background, if learning."""
        if self.learning is not None:
            self.learning.reflections.session_ended(session_id)
