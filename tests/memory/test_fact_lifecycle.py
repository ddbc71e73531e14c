"""The fact lifecycle on a real database: create, reinforce, contradict, decay, pins."""

from __future__ import annotations

import sqlite3

import pytest

from picobot.privacy.redaction import Redactor
from picobot.store.conversation.messages import SessionGone
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.learned.fact_rules import DAY_SECS, LifecycleRules, Observation, decay_steps_due
from picobot.store.learned.fact_writes import FactStore
from picobot.store.learned.facts import (
    FactFilter,
    active_facts,
    fact_history,
    fact_sources,
    find_facts,
    get_fact,
)

T0 = 1_700_000_000.0
ALICE = "tui:alice"


async def session(db: Database, user: str = ALICE, chat: str = "c") -> str:
    return await SessionRepo(db).current_or_create("tui", chat, user)


def obs(
    text: str, subject: str | None = "tea", category: str = "preference", replaces: bool = False
) -> Observation:
    return Observation(subject, category, text, replaces)


async def test_a_new_fact_starts_at_0_7_with_provenance_and_history(db: Database) -> None:
    sid = await session(db)
    store = FactStore(db)
    [applied] = await store.observe(
        ALICE, [obs("likes green tea")], session_id=sid, message_id=7, now=T0
    )
    assert applied.outcome == "created"
    fact = await db.read(lambda c: get_fact(c, applied.fact_id))
    assert fact is not None and fact.confidence == 0.7 and fact.active and not fact.pinned
    assert fact.user_id == ALICE and fact.subject == "tea" and fact.created_at == T0
    sources = await db.read(lambda c: fact_sources(c, applied.fact_id))
    assert [(s.session_id, s.message_id) for s in sources] == [(sid, 7)]
    [change] = await db.read(lambda c: fact_history(c, applied.fact_id))
    assert change.reason == "extracted" and change.new_text == "likes green tea"


async def test_re_observing_reinforces_instead_of_duplicating_up_to_1(db: Database) -> None:
    sid = await session(db)
    store = FactStore(db)
    [first] = await store.observe(
        ALICE, [obs("likes green tea")], session_id=sid, message_id=1, now=T0
    )
    for n in range(5):
        [again] = await store.observe(
            ALICE, [obs("Likes green tea!")], session_id=sid, message_id=2, now=T0 + n + 1
        )
        assert again.outcome == "reinforced" and again.fact_id == first.fact_id
    facts = await db.read(lambda c: find_facts(c, FactFilter(user_id=ALICE), None))
    assert len(facts) == 1
    assert facts[0].confidence == 1.0 and facts[0].updated_at == T0 + 5
    reasons = [h.reason for h in await db.read(lambda c: fact_history(c, first.fact_id))]
    assert reasons == ["extracted"] + ["reinforced"] * 5


async def test_a_replacing_fact_lowers_the_old_one_and_deactivates_it_below_0_3(
    db: Database,
) -> None:
    sid = await session(db)
    store = FactStore(db)
    [old] = await store.observe(
        ALICE, [obs("trip to Spain in May", "trip", "plan")], session_id=sid, message_id=1, now=T0
    )
    [new] = await store.observe(
        ALICE,
        [obs("trip to Japan in May", "trip", "plan", True)],
        session_id=sid,
        message_id=2,
        now=T0 + 1,
    )
    assert new.contradicted == (old.fact_id,)
    first = await db.read(lambda c: get_fact(c, old.fact_id))
    assert first is not None and first.confidence == 0.4 and first.active
    await store.observe(
        ALICE,
        [obs("trip to Peru in May", "trip", "plan", True)],
        session_id=sid,
        message_id=3,
        now=T0 + 2,
    )
    first = await db.read(lambda c: get_fact(c, old.fact_id))
    assert first is not None and first.confidence == 0.1 and not first.active
    history = await db.read(lambda c: fact_history(c, old.fact_id))
    assert [h.reason for h in history] == ["extracted", "contradicted", "contradicted"]
    assert history[-1].old_active is True and history[-1].new_active is False
    active = await db.read(lambda c: active_facts(c, ALICE, 0.3, 10))
    assert old.fact_id not in [f.id for f in active]


async def test_different_text_without_replacement_is_a_second_fact(db: Database) -> None:
    sid = await session(db)
    store = FactStore(db)
    await store.observe(
        ALICE,
        [obs("likes green tea"), obs("dislikes black tea")],
        session_id=sid,
        message_id=1,
        now=T0,
    )
    facts = await db.read(lambda c: find_facts(c, FactFilter(user_id=ALICE), None))
    assert sorted(f.confidence for f in facts) == [0.7, 0.7]


def test_decay_is_due_a_step_per_full_week_after_30_days() -> None:
    rules = LifecycleRules()
    assert decay_steps_due(T0, T0 + 30 * DAY_SECS, rules) == 0
    assert decay_steps_due(T0, T0 + 36.9 * DAY_SECS, rules) == 0
    assert decay_steps_due(T0, T0 + 37 * DAY_SECS, rules) == 1
    assert decay_steps_due(T0, T0 + 51 * DAY_SECS, rules) == 3


async def test_decay_lowers_stale_facts_once_per_week_and_spares_pins(db: Database) -> None:
    sid = await session(db)
    store = FactStore(db)
    [stale, pinned, fresh] = await store.observe(
        ALICE, [obs("a"), obs("b"), obs("c")], session_id=sid, message_id=1, now=T0
    )
    await store.set_pinned(ALICE, pinned.fact_id, True, now=T0)
    later = T0 + 40 * DAY_SECS
    await store.observe(ALICE, [obs("c")], session_id=sid, message_id=2, now=later)  # touched
    assert await store.decay(later) == 1
    assert await store.decay(later) == 0  # the same week is not taken twice
    got = await db.read(lambda c: get_fact(c, stale.fact_id))
    assert got is not None and got.confidence == 0.6
    await store.decay(T0 + 65 * DAY_SECS)  # 5 weeks in all: 0.7 - 0.5 = 0.2
    got = await db.read(lambda c: get_fact(c, stale.fact_id))
    assert got is not None and got.confidence == 0.2 and not got.active
    pin = await db.read(lambda c: get_fact(c, pinned.fact_id))
    assert pin is not None and pin.confidence == 0.7 and pin.active
    touched = await db.read(lambda c: get_fact(c, fresh.fact_id))
    assert touched is not None and touched.confidence == 0.8
    reasons = [h.reason for h in await db.read(lambda c: fact_history(c, stale.fact_id))]
    assert reasons == ["extracted", "decayed", "decayed"]


async def test_nothing_is_learned_from_a_session_that_is_gone(db: Database) -> None:
    with pytest.raises(SessionGone):
        await FactStore(db).observe(ALICE, [obs("x")], session_id="nope", message_id=1, now=T0)
    assert await db.read(lambda c: find_facts(c, FactFilter(), None)) == []


async def test_secrets_are_redacted_before_a_fact_is_stored(db: Database) -> None:
    sid = await session(db)
    db.redact = Redactor().redact
    store = FactStore(db)
    key = "AKIA" + "IOSFODNN7EXAMPLE"
    [a] = await store.observe(
        ALICE, [obs(f"uses key {key}", subject=key)], session_id=sid, message_id=1, now=T0
    )
    fact = await db.read(lambda c: get_fact(c, a.fact_id))
    assert fact is not None and key not in fact.text and key not in (fact.subject or "")
    assert "[REDACTED" in fact.text


async def test_pins_and_reads_are_scoped_to_the_owner(db: Database) -> None:
    sid = await session(db)
    store = FactStore(db)
    [a] = await store.observe(ALICE, [obs("x")], session_id=sid, message_id=1, now=T0)
    assert await store.set_pinned("tui:bob", a.fact_id, True, now=T0) is None
    assert await db.read(lambda c: get_fact(c, a.fact_id, "tui:bob")) is None
    assert await db.read(lambda c: active_facts(c, "tui:bob", 0.0, 10)) == []


async def test_active_facts_reads_in_one_snapshot_by_threshold_and_limit(db: Database) -> None:
    from picobot.memory.facts_block import render_facts_block
    from picobot.text.tokens import CharTokenEstimator

    sid = await session(db)
    store = FactStore(db)
    applied = await store.observe(
        ALICE, [obs("a"), obs("b"), obs("c")], session_id=sid, message_id=1, now=T0
    )
    await store.observe(ALICE, [obs("b")], session_id=sid, message_id=2, now=T0 + 1)
    await store.update(applied[2].fact_id, confidence=0.35, actor="op", now=T0 + 2)

    def snapshot(conn: sqlite3.Connection) -> tuple[list[str], list[str], str]:
        top = [f.text for f in active_facts(conn, ALICE, 0.3, 2)]
        strict = [f.text for f in active_facts(conn, ALICE, 0.5, 10)]
        block = render_facts_block(active_facts(conn, ALICE, 0.3, 10), CharTokenEstimator(), 200)
        return top, strict, block

    top, strict, block = await db.read(snapshot)
    assert top == ["b", "a"] and strict == ["b", "a"]
    assert block.startswith("3 of 3 facts") and block.index("] b") < block.index("] c")
    assert await db.read(snapshot) == (top, strict, block)  # byte-stable while unchanged


async def test_one_answer_naming_a_fact_twice_observes_it_once(db: Database) -> None:
    sid = await session(db)
    applied = await FactStore(db).observe(
        ALICE, [obs("likes tea"), obs("Likes  TEA")], session_id=sid, message_id=1, now=T0
    )
    assert [a.outcome for a in applied] == ["created"]
    [fact] = await db.read(lambda c: find_facts(c, FactFilter(user_id=ALICE), None))
    assert fact.confidence == 0.7


async def test_unpinning_restarts_the_untouched_clock(db: Database) -> None:
    sid = await session(db)
    store = FactStore(db)
    [a] = await store.observe(ALICE, [obs("x")], session_id=sid, message_id=1, now=T0)
    await store.set_pinned(ALICE, a.fact_id, True, now=T0)
    await store.decay(T0 + 60 * DAY_SECS)
    await store.set_pinned(ALICE, a.fact_id, False, now=T0 + 60 * DAY_SECS)
    assert await store.decay(T0 + 61 * DAY_SECS) == 0
    fact = await db.read(lambda c: get_fact(c, a.fact_id))
    assert fact is not None and fact.confidence == 0.7 and not fact.pinned
    reasons = [h.reason for h in await db.read(lambda c: fact_history(c, a.fact_id))]
    assert reasons == ["extracted", "pinned", "unpinned"]
