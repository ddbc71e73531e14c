"""Row-level steps of fact writes: one update, one history row, one source, one insert.

Shared by :mod:`picobot.store.learned.fact_writes`; each runs on the writer's plain ``sqlite3``
connection inside the caller's transaction.
"""

from __future__ import annotations

import sqlite3

from picobot.store.conversation.events import record_event
from picobot.store.learned.fact_rules import LifecycleRules, clamp, is_active
from picobot.store.learned.facts import Fact, get_fact

_EVENT_OF_REASON = {
    "extracted": "fact.created",
    "reinforced": "fact.reinforced",
    "contradicted": "fact.contradicted",
    "decayed": "fact.decayed",
    "pinned": "pin.added",
    "unpinned": "pin.removed",
}
"""The event a history ``reason`` records; an operator's change is created or edited."""


def fact_event(old: Fact | None, reason: str) -> str:
    """The event type of a fact change with this history ``reason``."""
    if reason in _EVENT_OF_REASON:
        return _EVENT_OF_REASON[reason]
    return "fact.created" if old is None else "fact.edited"


def record_change(
    conn: sqlite3.Connection,
    old: Fact | None,
    new: Fact,
    reason: str,
    now: float,
    *,
    session_id: str | None = None,
    actor: str | None = None,
) -> None:
    """Append the history row of a change from ``old`` (None: created) to ``new``, and
    its event (:func:`fact_event`; ids, reason and confidence, never the text).

    ``actor`` goes to the history as given; the event's actor is null when that is the
    fact's own user (a user action, like a turn) and "supervisor" for decay.
    """
    conn.execute(
        "INSERT INTO fact_history (fact_id, at, reason, old_text, new_text, old_confidence,"
        " new_confidence, old_active, new_active, session_id, actor)"
        " VALUES (?1, ?2, ?3, picobot_seal(?12, ?4), picobot_seal(?12, ?5), ?6, ?7, ?8, ?9,"
        " ?10, ?11)",
        (
            new.id,
            now,
            reason,
            None if old is None or old.text == new.text else old.text,
            new.text if old is None or old.text != new.text else None,
            None if old is None else old.confidence,
            new.confidence,
            None if old is None else int(old.active),
            int(new.active),
            session_id,
            actor,
            new.user_id,
        ),
    )
    kind = fact_event(old, reason)
    # The user's own change (a pin) is a user action: actor null, as for a turn.
    by = None if actor == new.user_id else actor
    if reason == "decayed" and by is None:
        by = "supervisor"
    record_event(
        conn,
        kind,
        now,
        user_id=new.user_id,
        session_id=session_id,
        actor=by,
        payload={
            "fact_id": new.id,
            "reason": reason,
            "confidence": new.confidence,
            "active": new.active,
            **({"kind": "fact"} if kind.startswith("pin.") else {}),
        },
    )


def set_fact(
    conn: sqlite3.Connection,
    fact: Fact,
    *,
    confidence: float,
    rules: LifecycleRules,
    text: str | None = None,
    touch: float | None = None,
    active: bool | None = None,
    decay_steps: int | None = None,
) -> Fact:
    """Update one fact; ``touch`` refreshes updated_at (and restarts its decay).

    Text and the active flag are written only when they change: the recall index is
    rewritten on those (trigger ``search_facts_au``), not on every confidence step.
    """
    confidence = clamp(confidence)
    act = is_active(confidence, rules) if active is None else active
    sets: list[str] = ["confidence = ?"]
    params: list[object] = [confidence]
    if act != fact.active:
        sets.append("active = ?")
        params.append(int(act))
    if text is not None and text != fact.text:
        sets.append("text = picobot_seal(?, ?)")
        params += [fact.user_id, text]
    if touch is not None:
        sets.append("updated_at = ?, decay_steps = 0")
        params.append(touch)
    if decay_steps is not None:
        sets.append("decay_steps = ?")
        params.append(decay_steps)
    conn.execute(f"UPDATE facts SET {', '.join(sets)} WHERE id = ?", (*params, fact.id))  # noqa: S608
    updated = get_fact(conn, fact.id)
    assert updated is not None  # updated in this very transaction
    return updated


def add_source(
    conn: sqlite3.Connection,
    fact_id: int,
    session_id: str | None,
    message_id: int | None,
    now: float,
) -> None:
    """Record where a fact was learned or confirmed (no session: an operator)."""
    conn.execute(
        "INSERT INTO fact_sources (fact_id, session_id, message_id, created_at)"
        " VALUES (?, ?, ?, ?)",
        (fact_id, session_id, message_id, now),
    )


def insert_fact(
    conn: sqlite3.Connection,
    user_id: str,
    subject: str | None,
    category: str,
    text: str,
    confidence: float,
    rules: LifecycleRules,
    now: float,
) -> Fact:
    """Insert a new fact; active when its confidence reaches the threshold."""
    confidence = clamp(confidence)
    cur = conn.execute(
        "INSERT INTO facts (user_id, subject, subject_tag, category, text, confidence, active,"
        " created_at, updated_at) VALUES (?1, picobot_seal(?1, ?2), picobot_tag(?1, ?2), ?3,"
        " picobot_seal(?1, ?4), ?5, ?6, ?7, ?8) RETURNING id",
        (user_id, subject, category, text, confidence, int(is_active(confidence, rules)), now, now),
    )
    fact = get_fact(conn, int(cur.fetchone()[0]))
    assert fact is not None
    return fact
