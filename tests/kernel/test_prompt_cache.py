"""Prompts that stay cached: consecutive turns share the previous prompt's context and
window as a prefix; each turn's recalled records and message come after it."""

from __future__ import annotations

import itertools
import random

from picobot.kernel.prompt.parts import NOTES_PREAMBLE, RECALL_PREAMBLE
from picobot.llm.base import ChatMessage
from picobot.store.db import Database
from picobot.store.retrieval.search import SearchIndex
from tests.kernel.test_memory_prompt import (
    EST,
    World,
    context_text,
    cost,
    db,
    history_of,
    recalled_block,
)

__all__ = ["db"]  # the fixture


async def chat(w: World, sid: str, texts: list[str]) -> list[list[ChatMessage]]:
    """Each text as a turn (the prompt, then a stored reply); every turn's prompt."""
    prompts = []
    for text in texts:
        prompts.append(await w.build(sid, text))
        await w.messages.append(sid, "assistant", f"reply to {text[:20]}", 6)
        await SearchIndex(w.db).index_pending()
    return prompts


def stable(prompt: list[ChatMessage]) -> list[ChatMessage]:
    """What an epoch keeps of a prompt: all but the turn's recall and its message."""
    body = prompt[:-1]
    if body and body[-1].content.startswith(RECALL_PREAMBLE):
        body = body[:-1]
    return body


def is_prefix(before: list[ChatMessage], after: list[ChatMessage]) -> bool:
    """``before`` kept its context and window in place in ``after``."""
    kept = stable(before)
    return after[: len(kept)] == kept


async def test_each_turn_extends_the_previous_prompt(db: Database) -> None:
    w = World(db)
    old = await w.session()
    await w.say(old, "the harbour crane broke", "ok", "the harbour ferry was late", "ok")
    sid = await w.sessions.create("tui", "tui:alice", "tui:alice")
    await w.memory("tui:alice", "home", "Lisbon")
    prompts = await chat(w, sid, [f"turn {i} about the harbour" for i in range(5)])
    for before, after in itertools.pairwise(prompts):
        assert is_prefix(before, after)
        # The previous message is in the window now, right after the kept prefix.
        assert after[len(stable(before))] == before[-1]
    # Every message has its records right before it, the most volatile part.
    for prompt in prompts:
        assert prompt[-2].content.startswith(RECALL_PREAMBLE)
        assert "the harbour crane broke" in prompt[-2].content
        assert sum(RECALL_PREAMBLE in m.content for m in prompt) == 1


async def test_the_window_drops_a_block_at_a_time(db: Database) -> None:
    w = World(db, max_session_messages=20, window_drop_messages=10)
    sid = await w.session()
    prompts = await chat(w, sid, [f"message {i}" for i in range(16)])
    lengths = [len(history_of(p)) for p in prompts]
    # The window grows by a turn up to 20 messages, then drops to the last 10 at once.
    assert lengths == [*range(0, 22, 2), 10, 12, 14, 16, 18]
    starts = [i for i in range(1, len(prompts)) if not is_prefix(prompts[i - 1], prompts[i])]
    assert starts == [11]  # a fresh start only when the window was full


async def test_a_deleted_recalled_record_never_comes_back(db: Database) -> None:
    w = World(db)
    old = await w.session()
    await w.say(old, "the secret zeppelin hangar is in Friedrichshafen", "ok")
    sid = await w.sessions.create("tui", "tui:alice", "tui:alice")
    first = await w.build(sid, "where is the zeppelin hangar?")
    assert "Friedrichshafen" in recalled_block(first)
    await w.say(sid, "it is there")
    async with db.transaction() as conn:  # as a purge of the old session does
        await conn.execute("DELETE FROM messages WHERE session_id = ?", (old,))
    second = await w.build(sid, "and the zeppelin?")
    assert "Friedrichshafen" not in str(second)


async def test_a_record_already_in_the_window_is_not_recalled_again(db: Database) -> None:
    w = World(db)
    old = await w.session()
    await w.say(old, "the kayak is red", "ok", "the kayak paddle is blue", "ok")
    sid = await w.sessions.create("tui", "tui:alice", "tui:alice")
    await w.say(sid, "my kayak has a name: Rosalind", "nice")
    prompts = await chat(w, sid, ["tell me about the kayak", "the kayak again?"])
    assert is_prefix(prompts[0], prompts[1])
    assert str(prompts[1]).count("Rosalind") == 1  # in the window, not recalled too
    assert "the kayak is red" in recalled_block(prompts[1])


async def test_each_message_gets_its_records_after_one_filled_the_budget(db: Database) -> None:
    w = World(db, context_budget_tokens=1500, recall_budget_tokens=300)
    old = await w.session()
    for i in range(30):
        await w.say(old, f"lighthouse log {i} " + "l" * 300, "ok")
    await w.say(old, "my dentist is Doctor Quokkaberg", "noted")
    sid = await w.sessions.create("tui", "tui:alice", "tui:alice")
    prompts = await chat(w, sid, ["the lighthouse logs?", "and which dentist do I see?"])
    # The first message's records filled what the prompt left; the second still gets
    # its own, in place of the first one's.
    assert EST.estimate(recalled_block(prompts[0])) > 1000
    assert "Quokkaberg" in recalled_block(prompts[1])
    assert "lighthouse log 7 " not in str(prompts[1])
    assert is_prefix(prompts[0], prompts[1])
    assert cost(prompts[1]) <= 1500


async def test_every_turn_of_a_long_chat_fits_the_budget(db: Database) -> None:
    w = World(db, context_budget_tokens=1500, recall_budget_tokens=300)
    rng = random.Random(5)
    old = await w.session()
    for i in range(30):
        await w.say(old, f"log {i} lighthouse " + "x" * rng.randrange(10, 900), "ok")
    sid = await w.sessions.create("tui", "tui:alice", "tui:alice")
    await w.memory("tui:alice", "note", "n" * 2000)
    texts = [f"lighthouse {i} " + "y" * rng.randrange(0, 3000) for i in range(40)]
    for prompt in await chat(w, sid, texts):
        assert cost(prompt) <= 1500


async def test_the_index_can_lag_without_breaking_the_epoch(db: Database) -> None:
    w = World(db)
    sid = await w.session()
    prompts = await chat(w, sid, ["alpha beta", "gamma delta"])
    await SearchIndex(db).index_pending(None)
    third = await w.build(sid, "alpha again")
    assert is_prefix(prompts[1], third)


async def test_every_message_keeps_half_the_recall_budget_in_a_heavy_window(
    db: Database,
) -> None:
    w = World(db, context_budget_tokens=2000, recall_budget_tokens=400)
    old = await w.session()
    for i in range(40):
        await w.say(old, f"kayak trip number {i} " + "k" * 100, "ok")
    sid = await w.sessions.create("tui", "tui:alice", "tui:alice")
    texts = [f"the kayak trip again, part {i} " + "w" * 400 for i in range(16)]
    prompts = await chat(w, sid, texts)
    for prompt in prompts:
        # Half the recall budget at least (a line may leave a few tokens unused).
        assert EST.estimate(recalled_block(prompt)) >= 200 - 40
        assert cost(prompt) <= 2000
    # Most turns still continue their epoch: the window gives way only now and then.
    kept = sum(is_prefix(a, b) for a, b in itertools.pairwise(prompts))
    assert kept >= len(prompts) // 2


async def test_a_fork_starts_where_its_parent_stands(db: Database) -> None:
    w = World(db, max_session_messages=20, window_drop_messages=10)
    parent = await w.session()
    # 13 turns: the parent's epoch started afresh at turn 12, a window of 10 messages
    # that has grown to 12 since; a fork's own start would keep the last 10 only.
    prompts = await chat(w, parent, [f"message {i}" for i in range(13)])
    assert not is_prefix(prompts[-3], prompts[-2])
    child = await w.sessions.create("tui", "tui:alice", "tui:alice", parent_session_id=parent)
    w.retriever.inherit(parent, child)
    forked = await w.build(child, "in the fork")
    assert is_prefix(prompts[-1], forked)
    assert forked[len(stable(prompts[-1]))] == prompts[-1][-1]


async def test_a_fork_of_a_session_without_an_epoch_starts_its_own(db: Database) -> None:
    w = World(db)
    parent = await w.session()
    await w.say(parent, "hello", "hi")
    child = await w.sessions.create("tui", "tui:alice", "tui:alice", parent_session_id=parent)
    w.retriever.inherit(parent, child)  # nothing to inherit: no prompt was built yet
    forked = await w.build(child, "in the fork")
    assert [m.content for m in forked[1:]] == ["hello", "hi", "in the fork"]


def notes_added(prompt: list[ChatMessage]) -> list[int]:
    """Where the prompt holds notes saved during its epoch (message indexes)."""
    return [i for i, m in enumerate(prompt) if m.content.startswith(NOTES_PREAMBLE)]


async def test_a_note_saved_mid_epoch_keeps_the_prefix_and_is_in_the_prompt(
    db: Database,
) -> None:
    w = World(db)
    await w.memory("tui:alice", "home", "Lisbon")
    sid = await w.session()
    prompts = await chat(w, sid, ["hello", "how are you"])
    await w.memory("tui:alice", "pet", "a cat named Tom")
    prompts += await chat(w, sid, ["what is my pet?", "and where do I live?"])
    for before, after in itertools.pairwise(prompts):
        assert is_prefix(before, after)  # the context message did not change
    assert "a cat named Tom" not in context_text(prompts[3])
    # The note stands before the message that first saw it, and stays there.
    (at,) = notes_added(prompts[2])
    assert at == len(prompts[2]) - 2 and "- pet: a cat named Tom" in prompts[2][at].content
    assert notes_added(prompts[3]) == [at]
    assert prompts[3][at + 1].content == "what is my pet?"
    # The next epoch renders it in the notes block, in place.
    assert "- pet: a cat named Tom" in context_text(await w.build(await w.session(), "hi"))


async def test_a_deleted_or_changed_note_leaves_the_prompt_at_once(db: Database) -> None:
    w = World(db)
    await w.memory("tui:alice", "home", "Lisbon")
    sid = await w.session()
    await chat(w, sid, ["hello"])
    await w.memory("tui:alice", "pet", "a cat named Tom")
    await chat(w, sid, ["what is my pet?"])
    assert await w.memories.delete("tui:alice", "pet")
    gone = await w.build(sid, "and now?")
    assert "a cat named Tom" not in str(gone) and "Lisbon" in context_text(gone)
    await w.messages.append(sid, "assistant", "ok", 1)
    await w.memory("tui:alice", "home", "Porto")  # one from the epoch's notes block
    changed = await w.build(sid, "where do I live?")
    assert "Lisbon" not in str(changed) and "- home: Porto" in context_text(changed)


async def test_a_later_message_recall_stays_within_the_model_cap(db: Database) -> None:
    w = World(
        db,
        context_budget_tokens=1024,
        recall_budget_tokens=256,
        later_recall_tokens=48,
        epoch_keep_messages=4,
    )
    old = await w.session()
    for i in range(30):
        await w.say(old, f"kayak trip number {i} to the island", "ok")
    sid = await w.session()
    prompts = await chat(w, sid, [f"the kayak trip again, part {i}" for i in range(12)])
    assert EST.estimate(recalled_block(prompts[0])) > 150  # the epoch's first: its floor
    starts = [0] + [i for i in range(1, 12) if not is_prefix(prompts[i - 1], prompts[i])]
    for i, prompt in enumerate(prompts):
        assert cost(prompt) <= 1024
        if i not in starts:
            assert 0 < EST.estimate(recalled_block(prompt)) <= 48
    # A new epoch starts with at most 4 messages of the window.
    assert all(len(history_of(prompts[i])) <= 4 for i in starts)
    assert len(starts) < 6
