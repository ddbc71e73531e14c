"""Learning through the assembled runtime: reply markers, chat commands, /reflect."""

from __future__ import annotations

import json
from pathlib import Path

from picobot.config.settings import Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, Outbound, OutboundKind
from picobot.runtime import Runtime, open_runtime
from picobot.store.learned.facts import FactFilter, fact_sources, find_facts

ALICE = Identity("tui", "tui:alice", "local")
BOB = Identity("tui", "tui:bob", "local")


async def say(rt: Runtime, who: Identity, text: str) -> list[Outbound]:
    return [e async for e in rt.kernel.handle(Inbound(who, text))]


def settings(tmp_path: Path, **learning: object) -> Settings:
    return Settings(
        data={"dir": str(tmp_path / "data")},
        llm={"provider": "scripted"},
        memory={"learning": learning},
    )


def shown(events: list[Outbound]) -> str:
    return "".join(e.text for e in events if e.kind == OutboundKind.TOKEN)


REPLY = (
    "Noted, green tea it is.\n"
    "[MEMORY:preference:tea] likes green tea\n"
    "[MEMORY:plan:trip:replace] visits Japan in May\n"
    "Anything else?"
)


async def test_marker_lines_split_across_chunks_are_never_shown_nor_stored(
    tmp_path: Path,
) -> None:
    # chunk_size=3 splits "[MEMORY:" over several deltas.
    provider = ScriptedProvider([REPLY], chunk_size=3)
    async with open_runtime(settings(tmp_path), provider=provider) as rt:
        events = await say(rt, ALICE, "I like green tea and I go to Japan in May")
        done = events[-1]
        stored = await rt.kernel.messages.last(done.session_id or "", 5)
        facts = await rt.db.read(lambda c: find_facts(c, FactFilter(user_id=ALICE.user_id), None))
        sources = await rt.db.read(lambda c: fact_sources(c, facts[0].id))
    assert "MEMORY" not in shown(events)
    assert shown(events) == "Noted, green tea it is.\nAnything else?"
    assert done.kind == OutboundKind.DONE and done.text == "Noted, green tea it is.\nAnything else?"
    assert stored[-1].role == "assistant" and "MEMORY" not in stored[-1].content
    assert {(f.subject, f.category, f.text) for f in facts} == {
        ("tea", "preference", "likes green tea"),
        ("trip", "plan", "visits Japan in May"),
    }
    assert all(f.confidence == 0.7 for f in facts)
    assert [(s.session_id, s.message_id) for s in sources] == [(done.session_id, stored[-1].id)]


async def test_a_marker_after_text_on_a_line_is_learned_never_shown_nor_stored(
    tmp_path: Path,
) -> None:
    # Before, only a marker that started a line was taken: this one reached the user.
    reply = (
        "Lovely choice! [MEMORY:preference:coffee] Dana prefers oat-milk flat whites\n"
        "Anything else? See [1] or [MEM] notes"
    )
    visible = "Lovely choice!\nAnything else? See [1] or [MEM] notes"
    provider = ScriptedProvider([reply], chunk_size=3)
    async with open_runtime(settings(tmp_path), provider=provider) as rt:
        events = await say(rt, ALICE, "I'll have an oat-milk flat white, for Dana")
        done = events[-1]
        stored = await rt.kernel.messages.last(done.session_id or "", 5)
        facts = await rt.db.read(lambda c: find_facts(c, FactFilter(user_id=ALICE.user_id), None))
    assert shown(events) == visible
    assert done.kind == OutboundKind.DONE and done.text == visible
    assert stored[-1].role == "assistant" and stored[-1].content == visible
    assert [(f.subject, f.category, f.text) for f in facts] == [
        ("coffee", "preference", "Dana prefers oat-milk flat whites")
    ]


async def test_a_turn_with_learning_on_makes_exactly_one_model_call(tmp_path: Path) -> None:
    provider = ScriptedProvider([REPLY, "second answer"])
    async with open_runtime(settings(tmp_path), provider=provider) as rt:
        await say(rt, ALICE, "I like green tea")
        assert len(provider.prompts) == 1
        await say(rt, ALICE, "and coffee too")
        assert len(provider.prompts) == 2
        assert rt.learning is not None
    # The system prompt told the (remote-class) model about the markers.
    assert "[MEMORY:category:subject]" in provider.prompts[0][0].content


async def test_with_learning_off_markers_are_left_alone_and_nothing_is_learned(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider([REPLY])
    async with open_runtime(settings(tmp_path, enabled=False), provider=provider) as rt:
        events = await say(rt, ALICE, "hi")
        facts = await rt.db.read(lambda c: find_facts(c, FactFilter(), None))
        reflect = (await say(rt, ALICE, "/reflect"))[-1]
        listing = (await say(rt, ALICE, "/facts"))[-1].text
    assert "[MEMORY:preference:tea]" in shown(events)
    assert facts == []
    assert reflect.kind == OutboundKind.ERROR and "switched off" in reflect.text
    assert "not learned any facts" in listing
    assert len(provider.prompts) == 1
    assert "MEMORY" not in provider.prompts[0][0].content


async def test_chat_commands_list_pin_and_forget_only_the_callers_facts(tmp_path: Path) -> None:
    provider = ScriptedProvider([REPLY])
    async with open_runtime(settings(tmp_path), provider=provider) as rt:
        await say(rt, ALICE, "I like green tea")
        listing = (await say(rt, ALICE, "/facts"))[-1].text
        facts = await rt.db.read(lambda c: find_facts(c, FactFilter(user_id=ALICE.user_id), None))
        first = facts[0].id
        assert f"#{first} (0.70)" in listing and "likes green tea" in listing
        assert "yet" in (await say(rt, BOB, "/facts"))[-1].text
        denied = (await say(rt, BOB, f"/forget fact {first}"))[-1]
        assert denied.kind == OutboundKind.ERROR and f"No fact #{first}" in denied.text
        assert "No pinned" in (await say(rt, ALICE, "/pins"))[-1].text
        assert "pinned" in (await say(rt, ALICE, f"/pin fact {first}"))[-1].text
        pins = (await say(rt, ALICE, "/pins"))[-1].text
        assert f"#{first}" in pins and "[pinned]" in pins
        assert "unpinned" in (await say(rt, ALICE, f"/unpin fact {first}"))[-1].text
        assert "Forgot fact" in (await say(rt, ALICE, f"/forget fact {first}"))[-1].text
        # Not a number, a superscript digit (str.isdigit says yes), too many digits.
        for number in ("x", "²", "1" * 25):
            bad = (await say(rt, ALICE, f"/forget fact {number}"))[-1]
            assert bad.kind == OutboundKind.ERROR and "Usage" in bad.text, number
        # /forget key still forgets memories.
        await say(rt, ALICE, "/remember pet: a cat")
        assert "Forgot memory" in (await say(rt, ALICE, "/forget pet"))[-1].text
        left = await rt.db.read(lambda c: find_facts(c, FactFilter(user_id=ALICE.user_id), None))
    assert first not in [f.id for f in left] and len(left) == 1


async def test_reflect_extracts_the_sessions_new_messages_with_one_call_per_chunk(
    tmp_path: Path,
) -> None:
    answer = json.dumps(
        [
            {"subject": "Lyon", "category": "personal", "text": "lives in Lyon"},
            {"subject": None, "category": "hobby", "text": "bad category is dropped"},
            "junk",
        ]
    )
    provider = ScriptedProvider(["ok", answer, "Sorry, I cannot help with that."])
    # Reflections (their own model call) are tested in tests/tasks/test_reflection.py.
    async with open_runtime(settings(tmp_path, reflections=False), provider=provider) as rt:
        await say(rt, ALICE, "I live in Lyon")
        reply = (await say(rt, ALICE, "/reflect"))[-1].text
        assert len(provider.prompts) == 2
        prompt = provider.prompts[1]
        assert "I live in Lyon" in prompt[1].content and '<data source="conversation"' in (
            prompt[1].content
        )
        again = (await say(rt, ALICE, "/reflect"))[-1].text
        assert len(provider.prompts) == 2  # nothing new: no model call
        facts = await rt.db.read(lambda c: find_facts(c, FactFilter(), None))
    assert "1 new facts" in reply and "Nothing new" in again
    assert [(f.user_id, f.subject, f.text) for f in facts] == [
        (ALICE.user_id, "lyon", "lives in Lyon")
    ]


async def test_a_stored_summary_starts_extraction_of_its_session(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [
            "ok",
            "Alice lives in Oslo.",
            json.dumps([{"subject": None, "category": "personal", "text": "lives in Oslo"}]),
        ]
    )
    config = Settings(
        data={"dir": str(tmp_path / "data")},
        llm={"provider": "scripted"},
        session={"memory": {"summarization_trigger_tokens": 100, "summarization_keep_recent": 0}},
        memory={"learning": {"reflections": False}},
    )
    async with open_runtime(config, provider=provider) as rt:
        await say(rt, ALICE, "I live in Oslo. " + "More words about my town. " * 30)
        await rt.tasks.join()  # the summary, then the extraction it started
        facts = await rt.db.read(lambda c: find_facts(c, FactFilter(), None))
    assert len(provider.prompts) == 3
    assert "summary" in provider.prompts[1][0].content
    assert '<data source="conversation"' in provider.prompts[2][1].content
    assert [f.text for f in facts] == ["lives in Oslo"]


async def test_reflect_says_so_when_the_model_fails(tmp_path: Path) -> None:
    from picobot.llm.scripted import ScriptedTurn

    provider = ScriptedProvider(["ok", ScriptedTurn(fail=True)])
    async with open_runtime(settings(tmp_path), provider=provider) as rt:
        await say(rt, ALICE, "I live in Lyon")
        reply = (await say(rt, ALICE, "/reflect"))[-1]
    assert reply.kind == OutboundKind.ERROR and "could not reflect" in reply.text


def test_the_markers_are_taught_to_models_that_can_follow_them() -> None:
    from picobot.runtime import markers_taught

    def conf(provider: str, **learning: object) -> Settings:
        return Settings(llm={"provider": provider}, memory={"learning": learning})

    assert markers_taught(conf("openai")) and markers_taught(conf("anthropic"))
    assert not markers_taught(conf("local"))  # the bundled small model
    assert markers_taught(conf("local", markers="on"))
    assert not markers_taught(conf("openai", markers="off"))
    assert not markers_taught(conf("openai", enabled=False))
