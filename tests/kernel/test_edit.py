"""/edit through the real kernel and SQLite file: the branch it starts, the turn it
answers there, what that branch's prompt holds and leaves out, and what it refuses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from picobot.config.settings import Settings
from picobot.llm.base import ToolCall
from picobot.llm.scripted import ScriptedProvider, ScriptedTurn
from picobot.messages import Identity, OutboundKind
from picobot.runtime import Runtime, open_runtime
from picobot.store.conversation.events import EventFilter
from picobot.store.learned.fact_rules import Observation
from tests.privacy.test_history_commands import ALICE, BOB, prompt_text, provider, rt, say

__all__ = ["provider", "rt"]  # the fixtures


async def indexed(rt: Runtime) -> None:
    """Index what was said, as the runtime's indexer does every half second."""
    await rt.services.search.index.index_pending(None)


async def current(rt: Runtime, who: Identity) -> str:
    sid = await rt.kernel.sessions.current(who.channel, who.chat_id, who.user_id)
    assert sid is not None
    return sid


async def transcript(rt: Runtime, session_id: str) -> list[str]:
    rows = await rt.db.fetchall(
        "SELECT picobot_open(content) FROM messages WHERE session_id = ? ORDER BY seq_order",
        (session_id,),
    )
    return [str(r[0]) for r in rows]


async def message_id(rt: Runtime, session_id: str, content: str) -> int:
    row = await rt.db.fetchone(
        "SELECT id FROM messages WHERE session_id = ? AND picobot_open(content) = ?",
        (session_id, content),
    )
    assert row is not None
    return int(row[0])


async def session_count(rt: Runtime) -> int:
    row = await rt.db.fetchone("SELECT COUNT(*) FROM sessions")
    assert row is not None
    return int(row[0])


async def test_edit_replaces_the_last_message_in_a_branch_and_keeps_the_old_one(
    rt: Runtime, provider: ScriptedProvider
) -> None:
    await say(rt, ALICE, "hello, my name is Ana")
    await say(rt, ALICE, "plan a week on zanzibar island with snorkelling")
    old = await current(rt, ALICE)
    before = await transcript(rt, old)
    await indexed(rt)

    out = await say(rt, ALICE, "/edit plan a week on madagascar island with snorkelling")

    branch = await current(rt, ALICE)
    assert branch != old
    kinds = [e.kind for e in out]
    assert kinds[0] == OutboundKind.NOTICE and f"/resume {old}" in out[0].text
    # Streamed like any reply: the session once the new text is stored, tokens, done.
    assert kinds[1] == OutboundKind.SESSION and out[1].session_id == branch
    assert OutboundKind.TOKEN in kinds and kinds[-1] == OutboundKind.DONE
    assert out[-1].text == "You said: plan a week on madagascar island with snorkelling"
    # The branch's prompt: the history before the edited message and the new text; not
    # the old text nor its answer, although recall matches them word for word otherwise.
    text = prompt_text(provider)
    assert "madagascar" in text and "my name is Ana" in text
    assert "zanzibar" not in text
    assert await transcript(rt, branch) == [
        *before[:2],
        "plan a week on madagascar island with snorkelling",
        "You said: plan a week on madagascar island with snorkelling",
    ]
    # The old branch is untouched, linked as the parent, and resumable.
    assert await transcript(rt, old) == before
    info = await rt.services.sessions.get(branch)
    assert info is not None and info.parent_session_id == old
    assert await rt.services.sessions.family(branch) == ([old], [])
    assert (await rt.services.sessions.family(old))[1] == [branch]
    resumed = await say(rt, ALICE, f"/resume {old}")
    assert resumed[-1].text == f"Resumed session {old} (4 messages)."
    await say(rt, ALICE, "what about zanzibar ferries?")
    assert "plan a week on zanzibar island" in prompt_text(provider)


async def test_recall_would_bring_the_old_text_to_any_other_session(
    rt: Runtime, provider: ScriptedProvider
) -> None:
    # The control of the test above: outside the branch, recall finds the old text.
    await say(rt, ALICE, "plan a week on zanzibar island with snorkelling")
    await indexed(rt)
    await say(rt, ALICE, "/new")
    await say(rt, ALICE, "plan a week on madagascar island with snorkelling")
    assert "zanzibar" in prompt_text(provider)


async def test_edit_an_earlier_message_drops_everything_after_it_from_the_prompt(
    rt: Runtime, provider: ScriptedProvider
) -> None:
    await say(rt, ALICE, "my cat is called Miso")
    await say(rt, ALICE, "my dog is called Pepper")
    await say(rt, ALICE, "my parrot is called Kiwi")
    old = await current(rt, ALICE)
    await indexed(rt)
    # #3 is the second message of mine ("#N": number N of this session, as in /search).
    out = await say(rt, ALICE, "/edit #3 my dog is called Biscuit, what are my pets called?")
    assert out[-1].kind == OutboundKind.DONE
    text = prompt_text(provider)
    assert "Miso" in text and "Biscuit" in text
    assert "Pepper" not in text and "Kiwi" not in text
    branch = await current(rt, ALICE)
    assert len(await transcript(rt, branch)) == 4
    assert len(await transcript(rt, old)) == 6
    # By id, the same: an edit of the branch's first message forks the branch in turn.
    first = await message_id(rt, branch, "my cat is called Miso")
    out = await say(rt, ALICE, f"/edit {first} my cat is called Tofu")
    assert out[-1].text == "You said: my cat is called Tofu"
    assert "Miso" not in prompt_text(provider) and "Biscuit" not in prompt_text(provider)
    grandchild = await current(rt, ALICE)
    assert await rt.services.sessions.family(grandchild) == ([branch, old], [])


async def test_edit_of_the_first_message_starts_an_empty_branch(
    rt: Runtime, provider: ScriptedProvider
) -> None:
    await say(rt, ALICE, "tell me about lighthouses")
    old = await current(rt, ALICE)
    await indexed(rt)
    out = await say(rt, ALICE, "/edit tell me about windmills and lighthouses")
    assert out[-1].kind == OutboundKind.DONE
    branch = await current(rt, ALICE)
    assert await transcript(rt, branch) == [
        "tell me about windmills and lighthouses",
        "You said: tell me about windmills and lighthouses",
    ]
    prompt = provider.prompts[-1]
    # System prompt and the new message: no history, nothing recalled.
    assert [m.role for m in prompt] == ["system", "user"]
    assert len(await transcript(rt, old)) == 2


async def test_the_summary_goes_with_the_branch_only_if_it_covers_kept_messages(
    rt: Runtime,
) -> None:
    for n in range(3):
        await say(rt, ALICE, f"message number {n}")
    old = await current(rt, ALICE)
    # A summary of messages 1-2 (the first exchange) travels with an edit of message 3.
    await rt.db.execute_write(
        "INSERT INTO session_summaries (session_id, summary, covered_seq, token_estimate,"
        " updated_at) VALUES (?, 'summary of the first exchange', 2, 5, 0)",
        (old,),
    )
    await say(rt, ALICE, "/edit #3 another second message")
    kept = await current(rt, ALICE)
    row = await rt.db.fetchone(
        "SELECT summary FROM session_summaries WHERE session_id = ?", (kept,)
    )
    assert row is not None and row[0] == "summary of the first exchange"
    # One covering message 3 does not travel with an edit of message 3.
    await say(rt, ALICE, f"/resume {old}")
    await rt.db.execute_write(
        "UPDATE session_summaries SET summary = 'summary up to the third', covered_seq = 4"
        " WHERE session_id = ?",
        (old,),
    )
    await say(rt, ALICE, "/edit #3 yet another second message")
    dropped = await current(rt, ALICE)
    row = await rt.db.fetchone(
        "SELECT summary FROM session_summaries WHERE session_id = ?", (dropped,)
    )
    assert row is None


@pytest.fixture
async def learning_rt(tmp_path: Path, provider: ScriptedProvider) -> AsyncIterator[Runtime]:
    """Learning on (a capable model configured): learned facts enter the prompt."""
    settings = Settings(data={"dir": str(tmp_path / "data")}, llm={"provider": "scripted"})
    async with open_runtime(settings, provider=provider) as runtime:
        yield runtime


def prompt_for(provider: ScriptedProvider, text: str) -> str:
    """The last chat prompt that ended with ``text`` (background jobs use the model too)."""
    prompt = next(p for p in reversed(provider.prompts) if p[-1].content == text)
    return "\n".join(m.content for m in prompt)


async def test_facts_learned_from_the_replaced_messages_stay_out_of_the_branch(
    learning_rt: Runtime, provider: ScriptedProvider
) -> None:
    rt = learning_rt
    await say(rt, ALICE, "I drink tea")
    await say(rt, ALICE, "I live in Lisbon")
    old = await current(rt, ALICE)
    for text, category, source in [
        ("drinks tea", "preference", "I drink tea"),
        ("lives in Lisbon", "personal", "I live in Lisbon"),
    ]:
        await rt.services.facts.store.observe(
            ALICE.user_id,
            [Observation(None, category, text)],
            session_id=old,
            message_id=await message_id(rt, old, source),
            now=1.0,
        )
    # The facts block of another session (its first prompt: facts join at an epoch's start).
    await say(rt, ALICE, "/new")
    await say(rt, ALICE, "what do you know?")
    assert "lives in Lisbon" in prompt_for(provider, "what do you know?")
    await say(rt, ALICE, f"/resume {old}")
    await say(rt, ALICE, "/edit #3 I live in Porto")
    text = prompt_for(provider, "I live in Porto")
    assert "drinks tea" in text
    assert "Lisbon" not in text
    # Every later turn of the branch too, not only its first.
    await say(rt, ALICE, "where do I live?")
    assert "Lisbon" not in prompt_for(provider, "where do I live?")


async def test_the_memory_search_tool_in_a_branch_does_not_find_what_was_replaced(
    rt: Runtime, provider: ScriptedProvider
) -> None:
    await say(rt, ALICE, "the password hint is marmalade")
    await say(rt, ALICE, "the other hint is aubergine")
    await indexed(rt)
    search = ToolCall("c1", "memory_search", '{"query": "hint"}')
    provider.add(ScriptedTurn(tool_calls=(search,)), "done looking")
    await say(rt, ALICE, "/edit the other hint is courgette")
    tool_output = provider.prompts[-1][-1].content
    assert "marmalade" in tool_output  # before the edited message: still the branch's
    assert "aubergine" not in tool_output


async def test_bad_references_and_others_messages_are_refused_and_change_nothing(
    rt: Runtime,
) -> None:
    await say(rt, BOB, "bob's own words")
    bob_session = await current(rt, BOB)
    bobs = await message_id(rt, bob_session, "bob's own words")
    out = await say(rt, ALICE, "/edit new words")  # nothing of Alice's yet
    assert out[-1].kind == OutboundKind.ERROR and "no message of yours" in out[-1].text
    await say(rt, ALICE, "alice's words")
    alice_session = await current(rt, ALICE)
    sessions = await session_count(rt)
    refusals = {
        f"/edit {bobs} stolen": "There is no such message of yours.",
        "/edit 999999 nothing": "There is no such message of yours.",
        "/edit #2 an answer is not mine": "There is no such message of yours.",
        "/edit #9 no such number": "There is no such message of yours.",
        "/edit": "Usage: /edit new text",
        "/edit 12": "Usage: /edit new text",
        "/edit /purge user": "cannot be a command",
    }
    for command, words in refusals.items():
        out = await say(rt, ALICE, command)
        assert [e.kind for e in out] == [OutboundKind.ERROR], command
        assert words in out[0].text, command
        # Bob's session is never named in what Alice is told.
        assert bob_session not in out[0].text
    assert await session_count(rt) == sessions
    assert await current(rt, ALICE) == alice_session
    assert await transcript(rt, bob_session) == ["bob's own words", "You said: bob's own words"]


async def test_a_message_of_another_session_of_yours_names_that_session(rt: Runtime) -> None:
    await say(rt, ALICE, "in the first session")
    first = await current(rt, ALICE)
    mine = await message_id(rt, first, "in the first session")
    await say(rt, ALICE, "/new")
    await say(rt, ALICE, "in the second session")
    out = await say(rt, ALICE, f"/edit {mine} changed")
    assert out[-1].kind == OutboundKind.ERROR
    assert f"/resume {first}" in out[-1].text


async def test_the_branch_is_recorded_as_a_fork_of_the_edited_message(rt: Runtime) -> None:
    await say(rt, ALICE, "one")
    await say(rt, ALICE, "two")
    old = await current(rt, ALICE)
    await say(rt, ALICE, "/edit #3 deux")
    branch = await current(rt, ALICE)
    where = EventFilter(session_id=branch, types=("session.forked",))
    forked = await rt.services.events.list(where, 10)
    assert len(forked) == 1 and forked[0].payload == {
        "channel": "whatsapp",
        "parent_session_id": old,
        "edited_seq": 3,
    }
