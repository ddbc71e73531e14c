"""Learned facts in the prompt: their own block, byte-stable, in the trim order."""

from __future__ import annotations

import time

import pytest

from picobot.config.learning import LearningSettings
from picobot.kernel.prompt.retriever import MemoryRetriever
from picobot.store.db import Database
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.learned.facts import active_facts
from tests.kernel.test_memory_prompt import EST, World, context_text, cost, db

__all__ = ["db"]  # the fixture

ALICE = "tui:alice"


def learning_world(db: Database, *, enabled: bool = True, **settings: object) -> World:
    w = World(db, **settings)
    w.retriever = MemoryRetriever(
        db=db, estimator=EST, settings=w.cfg, learning=LearningSettings(enabled=enabled)
    )
    return w


async def learn(db: Database, user: str, *facts: tuple[str | None, str, str]) -> None:
    store = FactStore(db)
    for subject, category, text in facts:
        await store.create(
            user,
            Observation(subject, category, text),
            confidence=0.8,
            actor="test",
            now=time.time(),
        )


def facts_block(prompt: list[object]) -> str:
    data = context_text(prompt)  # type: ignore[arg-type]
    tag = '<data source="learned_facts">'
    return data.split(tag)[1].split("</data>")[0] if tag in data else ""


async def test_facts_enter_the_context_grouped_and_byte_stable(db: Database) -> None:
    w = learning_world(db)
    await learn(db, ALICE, ("Pixel", "personal", "is a grey cat"), (None, "preference", "tea"))
    sid = await w.session()
    first = await w.build(sid, "hello")
    block = facts_block(first)
    assert block.startswith("\n2 of 2 facts, ~")
    assert "Pixel:\n- (0.80) [personal] is a grey cat" in block
    assert "general:\n- (0.80) [preference] tea" in block
    await w.messages.append(sid, "assistant", "hi", 1)
    second = await w.build(sid, "and again")
    assert second[1] == first[1]  # the same bytes: the prefix stays cached


async def test_only_the_callers_facts_and_only_while_learning_is_on(db: Database) -> None:
    await learn(db, ALICE, ("Pixel", "personal", "is a grey cat"))
    await learn(db, "tui:bob", ("Rex", "personal", "is a dog"))
    w = learning_world(db)
    sid = await w.session()
    block = facts_block(await w.build(sid, "hello"))
    assert "grey cat" in block and "Rex" not in block
    off = learning_world(db, enabled=False)
    assert facts_block(await off.build(sid, "hello")) == ""


async def test_facts_keep_to_their_share_of_the_budget(db: Database) -> None:
    await learn(db, ALICE, *((f"topic {i}", "knowledge", "f" * 150) for i in range(40)))
    w = learning_world(db, context_budget_tokens=2000)
    sid = await w.session()
    block = facts_block(await w.build(sid, "hello"))
    assert 0 < EST.estimate(block) <= 2000 * 0.15


async def test_facts_give_way_after_recall_and_before_memories(db: Database) -> None:
    await learn(db, ALICE, *((f"topic {i}", "knowledge", "fact " * 20) for i in range(10)))
    w = learning_world(db, context_budget_tokens=450, recall_budget_tokens=100)
    for i in range(3):
        await w.memory(ALICE, f"note_{i}", "memo " * 20)
    sid = await w.session()
    await w.say(sid, *[f"turn {i} " + "t" * 200 for i in range(6)])
    prompt = await w.build(sid, "hello")
    assert cost(prompt) <= 450
    assert facts_block(prompt) == ""  # facts went
    assert "note_0" in context_text(prompt)  # memories stayed
    roomy = await learning_world(db).build(sid, "hello again")
    assert facts_block(roomy) != ""  # they were trimmed, not missing


async def test_the_block_is_rendered_again_only_when_a_fact_changes(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    import picobot.kernel.prompt.retriever as memory_prompt

    calls: list[int] = []
    render = memory_prompt.render_facts_block

    def counting(*args: object, **kwargs: object) -> str:
        calls.append(1)
        return render(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(memory_prompt, "render_facts_block", counting)
    w = learning_world(db)
    await learn(db, ALICE, ("Pixel", "personal", "is a grey cat"))
    sid = await w.session()
    await w.build(sid, "hello")
    await w.messages.append(sid, "assistant", "hi", 1)
    await w.build(sid, "and again")
    assert len(calls) == 1  # the session's second turn reuses the rendered block
    [fact] = await db.read(lambda c: active_facts(c, ALICE, 0.3, 50))
    await FactStore(db).update(
        fact.id, text="is a black cat", confidence=None, active=None, actor="t", now=time.time()
    )
    await w.messages.append(sid, "assistant", "ok", 1)
    third = await w.build(sid, "and now")
    assert len(calls) == 2 and "is a black cat" in facts_block(third)
