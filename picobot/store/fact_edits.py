"""An operator's edits of learned facts, the same from the CLI and the admin API.

Validation first, then the writes of :class:`FactStore` (which redact and record each
change with ``actor`` in the fact's history), so bad input changes nothing and both
front ends apply one rule: an unknown category or an empty text is refused
(UserError, shown verbatim), a text longer than 40 words is cut to 40, as extraction
does.
"""

from __future__ import annotations

from picobot.errors import UserError
from picobot.memory.facts import normalize_text, observation
from picobot.store.db import Database
from picobot.store.fact_writes import FactStore
from picobot.store.facts import Fact, get_fact


async def create_fact(
    store: FactStore,
    user_id: str,
    *,
    subject: str | None,
    category: str,
    text: str,
    confidence: float | None,
    actor: str,
    now: float,
) -> Fact:
    """A new fact of ``user_id`` made by ``actor`` (no session provenance)."""
    try:
        found = observation(subject, category, text)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return await store.create(user_id, found, confidence=confidence, actor=actor, now=now)


async def edit_fact(
    db: Database,
    store: FactStore,
    fact_id: int,
    *,
    text: str | None = None,
    confidence: float | None = None,
    active: bool | None = None,
    pinned: bool | None = None,
    actor: str,
    now: float,
) -> Fact | None:
    """Change what is given of fact ``fact_id``; None if there is no such fact.

    A new confidence sets the active flag by the threshold unless ``active`` is given.
    A pin change is its own history row (``pinned``/``unpinned``).
    """
    if text is None and confidence is None and active is None and pinned is None:
        raise UserError("Nothing to change: give a text, confidence, active flag or pin.")
    if text is not None:
        try:
            text = normalize_text(text)
        except ValueError as exc:
            raise UserError(str(exc)) from None
    fact = await db.read(lambda c: get_fact(c, fact_id))
    if fact is None:
        return None
    changed: Fact | None = fact
    if text is not None or confidence is not None or active is not None:
        changed = await store.update(
            fact_id, text=text, confidence=confidence, active=active, actor=actor, now=now
        )
    if changed is not None and pinned is not None:
        changed = await store.set_pinned(fact.user_id, fact_id, pinned, now=now, actor=actor)
    return changed
