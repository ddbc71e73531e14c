"""Writing learned facts by the lifecycle rules of :mod:`picobot.store.learned.fact_rules`.

Every change is one write (group-committed, see :meth:`Database.write`) that updates
the fact and appends a ``fact_history`` row saying what changed, from what and why,
so an operator can see how a fact evolved. Text and subjects pass the redactor before
they are stored, whoever writes them (extraction, a reply marker, an operator).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass

from picobot.store.conversation.events import record_event
from picobot.store.conversation.messages import SessionGone
from picobot.store.conversation.preferences import learning_allowed
from picobot.store.db import Database
from picobot.store.keys.sealing import tag_matches
from picobot.store.learned.fact_paraphrase import FactParaphrases
from picobot.store.learned.fact_rows import add_source, insert_fact, record_change, set_fact
from picobot.store.learned.fact_rules import (
    LifecycleRules,
    Observation,
    clamp,
    decay_steps_due,
    is_active,
    same_text,
)
from picobot.store.learned.facts import (
    _COLUMNS,
    Fact,
    FactFilter,
    fact_from_row,
    find_facts,
    get_fact,
)

DAY_SECS = 86_400.0


@dataclass(frozen=True, slots=True)
class Applied:
    """What observing one fact did: ``created``, ``reinforced`` (and the fact's id)."""

    outcome: str
    fact_id: int
    contradicted: tuple[int, ...] = ()


class FactStore:
    """Lifecycle-aware writes of learned facts."""

    def __init__(
        self,
        db: Database,
        *,
        rules: LifecycleRules | None = None,
        paraphrases: FactParaphrases | None = None,
    ) -> None:
        self._db = db
        self.rules = rules or LifecycleRules()
        # With an embedding model: a fact said again in other words is reinforced.
        self.paraphrases = paraphrases

    async def observe(
        self,
        user_id: str,
        observations: Sequence[Observation],
        *,
        session_id: str | None,
        message_id: int | None,
        now: float,
    ) -> list[Applied]:
        """Store what was observed about ``user_id``, with its provenance.

        The same subject, category and text (case and punctuation aside) reinforces
        the known fact instead of duplicating it, and so does an active fact of the
        category said in other words, when ``paraphrases`` is set; an observation that ``replaces``
        lowers the other active facts of its subject and category first. With
        ``session_id``, only while that session exists (checked in the same write), so
        nothing is learned from a session purged meanwhile: :class:`SessionGone`.
        Nothing is stored for a user who turned learning off (``/learning off``).
        """
        cleaned = [
            Observation(
                None if o.subject is None else self._db.redact(o.subject),
                o.category,
                self._db.redact(o.text),
                o.replaces,
            )
            for o in observations
        ]

        # One answer naming a fact twice observed it once.
        seen: set[tuple[str | None, str, str]] = set()
        unique = []
        for o in cleaned:
            key = (o.subject, o.category, " ".join(o.text.casefold().split()))
            if key not in seen:
                seen.add(key)
                unique.append(o)

        restates: dict[int, int] = {}
        if self.paraphrases is not None and unique:
            restates = await self.paraphrases.match(self._db, user_id, unique)

        def write(conn: sqlite3.Connection) -> list[Applied]:
            # Checked in the write itself: a /learning off takes effect for every
            # writer at once, a model answer already on its way included.
            if not learning_allowed(conn, user_id):
                return []
            if (
                session_id is not None
                and conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
                is None
            ):
                raise SessionGone(session_id)
            return [
                self._observe_one(conn, user_id, obs, session_id, message_id, now, restates.get(i))
                for i, obs in enumerate(unique)
            ]

        return await self._db.write(write)

    def _observe_one(
        self,
        conn: sqlite3.Connection,
        user_id: str,
        obs: Observation,
        session_id: str | None,
        message_id: int | None,
        now: float,
        restated: int | None = None,
    ) -> Applied:
        rules = self.rules
        known = [
            fact_from_row(r)
            for r in conn.execute(
                f"SELECT {_COLUMNS} FROM facts WHERE user_id = ?1 AND category = ?2"  # noqa: S608
                f" AND {tag_matches('subject_tag', 'subject', '?1', '?3')} ORDER BY id",
                (user_id, obs.category, obs.subject),
            ).fetchall()
        ]
        if restated is not None:
            # A paraphrase of an active fact (FactParaphrases), if it is still one.
            again = get_fact(conn, restated)
            if again is not None and again.user_id == user_id and again.active:
                known = [again, *known]
        for fact in known:
            if fact.id == restated or same_text(fact.text, obs.text):
                new = set_fact(
                    conn,
                    fact,
                    confidence=fact.confidence + rules.reinforce_step,
                    rules=rules,
                    touch=now,
                )
                record_change(conn, fact, new, "reinforced", now, session_id=session_id)
                add_source(conn, fact.id, session_id, message_id, now)
                return Applied("reinforced", fact.id)
        lowered: list[int] = []
        if obs.replaces:
            for fact in known:
                if fact.active and not fact.pinned:
                    new = set_fact(
                        conn, fact, confidence=fact.confidence - rules.contradict_step, rules=rules
                    )
                    record_change(conn, fact, new, "contradicted", now, session_id=session_id)
                    lowered.append(fact.id)
        fact = insert_fact(
            conn, user_id, obs.subject, obs.category, obs.text, rules.initial_confidence, rules, now
        )
        record_change(conn, None, fact, "extracted", now, session_id=session_id)
        add_source(conn, fact.id, session_id, message_id, now)
        return Applied("created", fact.id, tuple(lowered))

    async def decay(self, now: float, *, batch_size: int = 500) -> int:
        """Apply the staleness decay due by ``now``; return how many facts changed.

        A fact untouched for ``decay_after_days`` loses ``decay_step`` per full
        ``decay_every_days`` after that (steps already applied are not applied again)
        and turns inactive below ``min_confidence``. Pinned facts never decay.
        """
        rules = self.rules
        cutoff = now - (rules.decay_after_days + rules.decay_every_days) * DAY_SECS
        changed = 0
        after = 0
        while True:

            def step(conn: sqlite3.Connection, after: int = after) -> tuple[int, int]:
                rows = conn.execute(
                    f"SELECT {_COLUMNS}, decay_steps FROM facts WHERE active = 1"  # noqa: S608
                    " AND pinned = 0 AND updated_at <= ? AND id > ? ORDER BY id LIMIT ?",
                    (cutoff, after, batch_size),
                ).fetchall()
                n = 0
                for row in rows:
                    fact = fact_from_row(row)
                    due = decay_steps_due(fact.updated_at, now, rules)
                    todo = due - int(row["decay_steps"])
                    if todo <= 0:
                        continue
                    new = set_fact(
                        conn,
                        fact,
                        confidence=fact.confidence - todo * rules.decay_step,
                        rules=rules,
                        decay_steps=due,
                    )
                    record_change(conn, fact, new, "decayed", now)
                    n += 1
                return n, int(rows[-1]["id"]) if rows else -1

            n, last = await self._db.write(step)
            changed += n
            if last < 0:
                return changed
            after = last

    async def create(
        self,
        user_id: str,
        obs: Observation,
        *,
        confidence: float | None,
        actor: str,
        now: float,
    ) -> Fact:
        """An operator's new fact (no session provenance, so no session purge takes it)."""
        rules = self.rules
        conf = rules.initial_confidence if confidence is None else confidence
        subject = None if obs.subject is None else self._db.redact(obs.subject)
        text = self._db.redact(obs.text)

        def write(conn: sqlite3.Connection) -> Fact:
            fact = insert_fact(conn, user_id, subject, obs.category, text, conf, rules, now)
            record_change(conn, None, fact, "operator", now, actor=actor)
            add_source(conn, fact.id, None, None, now)
            return fact

        return await self._db.write(write)

    async def update(
        self,
        fact_id: int,
        *,
        text: str | None = None,
        confidence: float | None = None,
        active: bool | None = None,
        actor: str,
        now: float,
        user_id: str | None = None,
    ) -> Fact | None:
        """Change a fact's text, confidence or active flag; None if there is no such fact.

        With ``user_id`` only that user's fact. An explicit ``active`` wins over the
        confidence threshold (an operator may keep a weak fact in use).
        """
        rules = self.rules
        new_text = None if text is None else self._db.redact(text)

        def write(conn: sqlite3.Connection) -> Fact | None:
            fact = get_fact(conn, fact_id, user_id)
            if fact is None:
                return None
            conf = fact.confidence if confidence is None else confidence
            act = active
            if act is None and confidence is not None:
                act = is_active(clamp(conf), rules)
            new = set_fact(
                conn,
                fact,
                confidence=conf,
                rules=rules,
                text=new_text,
                touch=now,
                active=fact.active if act is None else act,
            )
            record_change(conn, fact, new, "operator", now, actor=actor)
            return new

        return await self._db.write(write)

    async def set_pinned(
        self, user_id: str, fact_id: int, pinned: bool, *, now: float, actor: str | None = None
    ) -> Fact | None:
        """Pin or unpin ``user_id``'s fact (a pinned fact never decays); None if not theirs.

        Either change refreshes ``updated_at``, so decay starts over from now. The
        history names ``actor`` (an operator), or else the user.
        """

        def write(conn: sqlite3.Connection) -> Fact | None:
            fact = get_fact(conn, fact_id, user_id)
            if fact is None:
                return None
            if fact.pinned != pinned:
                # A pin change is a touch: an unpinned fact starts its 30 days afresh
                # rather than losing every step it was spared at once.
                conn.execute(
                    "UPDATE facts SET pinned = ?, updated_at = ?, decay_steps = 0 WHERE id = ?",
                    (int(pinned), now, fact_id),
                )
                new = get_fact(conn, fact_id)
                assert new is not None
                record_change(
                    conn, fact, new, "pinned" if pinned else "unpinned", now, actor=actor or user_id
                )
                return new
            return fact

        return await self._db.write(write)

    async def delete(self, where: FactFilter, *, actor: str | None = None, now: float = 0) -> int:
        """Delete the facts matching ``where`` with their sources and history; how many.

        Each deleted fact records ``fact.deleted`` (by ``actor``: an operator, or None for
        the user themselves) in the same write.
        """
        at = now or time.time()

        def write(conn: sqlite3.Connection) -> int:
            doomed = find_facts(conn, where, None)
            for fact in doomed:
                record_event(
                    conn,
                    "fact.deleted",
                    at,
                    user_id=fact.user_id,
                    actor=actor,
                    payload={"fact_id": fact.id, "reason": "deleted"},
                )
            ids = (json.dumps([f.id for f in doomed]),)
            doomed_ids = "IN (SELECT value FROM json_each(?))"
            conn.execute(f"DELETE FROM fact_sources WHERE fact_id {doomed_ids}", ids)  # noqa: S608
            conn.execute(f"DELETE FROM fact_history WHERE fact_id {doomed_ids}", ids)  # noqa: S608
            return int(conn.execute(f"DELETE FROM facts WHERE id {doomed_ids}", ids).rowcount)  # noqa: S608

        return await self._db.write(write)

    async def progress(self, session_id: str) -> int:
        """The last ``seq_order`` of ``session_id`` that extraction has read (0: none)."""
        row = await self._db.fetchone(
            "SELECT covered_seq FROM fact_progress WHERE session_id = ?", (session_id,)
        )
        return int(row[0]) if row else 0

    async def set_progress(self, session_id: str, covered_seq: int, now: float) -> None:
        """Record how far extraction has read ``session_id`` (nothing if it is gone)."""
        await self._db.execute_write(
            "INSERT INTO fact_progress (session_id, covered_seq, updated_at)"
            " SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM sessions WHERE id = ?1)"
            " ON CONFLICT(session_id) DO UPDATE SET covered_seq = MAX(fact_progress.covered_seq,"
            " excluded.covered_seq), updated_at = excluded.updated_at",
            (session_id, covered_seq, now),
        )
