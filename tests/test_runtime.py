"""End to end through the assembled runtime: memory, recall and summarization wiring."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from picobot.config.settings import DEFAULT_SYSTEM_PROMPT, LOCAL_SYSTEM_PROMPT, Settings
from picobot.llm.base import ChatMessage, ToolCall
from picobot.llm.scripted import ScriptedProvider, ScriptedTurn
from picobot.memory.markers import INSTRUCTIONS as MARKER_INSTRUCTIONS
from picobot.messages import Identity, Inbound, Outbound, OutboundKind
from picobot.runtime import INDEX_INTERVAL_SECS, Runtime, open_runtime
from picobot.text.tokens import prompt_cost

ALICE = Identity("tui", "tui:alice", "local")
README = Path(__file__).resolve().parents[1] / "README.md"
BOB = Identity("tui", "tui:bob", "local")


async def say(rt: Runtime, who: Identity, text: str) -> list[Outbound]:
    return [e async for e in rt.kernel.handle(Inbound(who, text))]


async def queued(rt: Runtime) -> int:
    """Messages still waiting for the recall indexer."""
    row = await rt.db.fetchone("SELECT COUNT(*) FROM search_pending")
    assert row is not None
    return int(row[0])


async def until_indexed(rt: Runtime) -> None:
    """Wait for the runtime's periodic indexer to empty the queue (nothing else does)."""
    async with asyncio.timeout(20 * INDEX_INTERVAL_SECS):
        while await queued(rt):  # noqa: ASYNC110 - a table row: no event to wait on
            await asyncio.sleep(0.05)


def last_chat_prompt(provider: ScriptedProvider, text: str) -> list[ChatMessage]:
    """The newest prompt that ends with the user's ``text`` (background prompts do not)."""
    return next(p for p in reversed(provider.prompts) if p[-1].content == text)


def settings(tmp_path: Path, **memory: object) -> Settings:
    return Settings(data={"dir": str(tmp_path / "data")}, session={"memory": memory})


async def test_memory_saved_in_one_session_shapes_later_sessions_of_that_user_only(
    tmp_path: Path,
) -> None:
    save = ToolCall(
        "c1", "memory", json.dumps({"action": "save", "key": "pet", "content": "a cat named Tom"})
    )
    provider = ScriptedProvider([ScriptedTurn(tool_calls=(save,)), "I will remember."])
    async with open_runtime(settings(tmp_path), provider=provider) as rt:
        first = await say(rt, ALICE, "Please remember my pet is a cat named Tom")
        assert first[-1].kind == OutboundKind.DONE
        await say(rt, ALICE, "/new")
        await say(rt, ALICE, "what do you know about me?")
        # The chat's prompt, not a reflection of the ended session the background ran.
        alice_prompt = last_chat_prompt(provider, "what do you know about me?")
        await say(rt, BOB, "what do you know about me?")
        bob_prompt = last_chat_prompt(provider, "what do you know about me?")
    assert "- pet: a cat named Tom" in alice_prompt[1].content
    assert alice_prompt[1].role == "user" and "<data" in alice_prompt[1].content
    assert "Tom" not in str(bob_prompt)


async def test_fact_from_an_older_session_is_recalled_by_keyword(tmp_path: Path) -> None:
    provider = ScriptedProvider()
    async with open_runtime(settings(tmp_path), provider=provider) as rt:
        await say(rt, ALICE, "My bicycle is a green Bianchi from 1987")
        await say(rt, ALICE, "/new")
        await say(rt, BOB, "I ride a bicycle too")
        # Messages are indexed in batches by a background task, not by the turn.
        await until_indexed(rt)
        await say(rt, ALICE, "which bicycle do I have?")
        prompt = provider.prompts[-1]
    assert "green Bianchi" in prompt[1].content
    assert "recalled_conversations" in prompt[1].content
    assert "I ride a bicycle too" not in str(prompt)


async def test_one_reader_thread_serves_every_read_of_a_turn(tmp_path: Path) -> None:
    conf = Settings(data={"dir": str(tmp_path / "data"), "reader_threads": 1})
    provider = ScriptedProvider()
    async with open_runtime(conf, provider=provider) as rt:
        assert rt.db.reader_threads == 1
        await say(rt, ALICE, "/remember pet: a tortoise named Slowpoke")
        await say(rt, ALICE, "My kayak is a red Prijon")
        await say(rt, ALICE, "/new")
        await until_indexed(rt)
        # Memories, summary, recall and window: several reads on the one reader.
        replies = await asyncio.gather(*(say(rt, ALICE, "which kayak?") for _ in range(3)))
        prompt = provider.prompts[-1]
    assert all(r[-1].kind == OutboundKind.DONE for r in replies)
    assert "Slowpoke" in prompt[1].content  # the memories' context message
    recalled = [m.content for m in prompt if "recalled_conversations" in m.content]
    assert recalled and "red Prijon" in recalled[0]


async def test_commands_of_every_feature_are_wired(tmp_path: Path) -> None:
    async with open_runtime(settings(tmp_path), provider=ScriptedProvider()) as rt:
        help_text = (await say(rt, ALICE, "/help"))[-1].text
        for command in ("/remember", "/memories", "/forget", "/search", "/summary", "/fork"):
            assert command in help_text
        await say(rt, ALICE, "/remember city: Lisbon")
        assert "Lisbon" in (await say(rt, ALICE, "/memories"))[-1].text
        await say(rt, ALICE, "the harbour in Lisbon is lovely")
        found = (await say(rt, ALICE, "/search harbour"))[-1].text
        assert "harbour" in found


async def test_summarization_runs_in_the_background(tmp_path: Path) -> None:
    provider = ScriptedProvider()
    cfg = settings(tmp_path, summarization_trigger_tokens=100, summarization_keep_recent=2)
    async with open_runtime(cfg, provider=provider) as rt:
        for i in range(6):
            await say(rt, ALICE, f"story part {i} " + "words " * 20)
        await rt.tasks.join()
        summary = (await say(rt, ALICE, "/summary"))[-1].text
    # 12 messages, the last 2 kept word for word: the summary covers 1-10.
    assert "(covers messages 1-10;" in summary
    assert provider.prompts[-1][0].role == "system"  # the summarizer's own prompt ran


async def test_secrets_are_redacted_before_storage_index_and_model(tmp_path: Path) -> None:
    key = "AKIA" + "IOSFODNN7EXAMPLE"
    provider = ScriptedProvider()
    async with open_runtime(settings(tmp_path), provider=provider) as rt:
        await say(rt, ALICE, f"my aws key is {key} keep it safe")
        await say(rt, ALICE, f"/remember aws: {key}")
        rows = await rt.db.fetchall("SELECT picobot_open(content) FROM messages")
        memories = await rt.db.fetchall("SELECT picobot_open(content) FROM user_memories")
        hits = await rt.db.fetchall(
            "SELECT count(*) FROM search_index WHERE search_index MATCH ?", (f'"{key.lower()}"',)
        )
    assert key not in provider.prompts[0][-1].content
    assert "[REDACTED:aws_access_key]" in provider.prompts[0][-1].content
    assert all(key not in r[0] for r in rows) and len(rows) == 2
    assert memories[0][0] == "[REDACTED:aws_access_key]"
    assert hits[0][0] == 0
    raw = b"".join(p.read_bytes() for p in (tmp_path / "data").iterdir() if p.is_file())
    assert key.encode() not in raw


async def test_redaction_can_be_switched_off(tmp_path: Path) -> None:
    key = "AKIA" + "IOSFODNN7EXAMPLE"
    cfg = Settings(data={"dir": str(tmp_path / "data")}, privacy={"redact_secrets": False})
    async with open_runtime(cfg, provider=ScriptedProvider()) as rt:
        await say(rt, ALICE, f"key {key}")
        rows = await rt.db.fetchall(
            "SELECT picobot_open(content) FROM messages WHERE role = 'user'"
        )
    assert rows[0][0] == f"key {key}"


async def test_legacy_sessions_json_is_imported_at_startup(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    snapshot = {
        "version": 1,
        "sessions": [
            {
                "id": "legacy1",
                "user_id": "tui:alice",
                "channel": "tui",
                "chat_id": "local",
                # Recent: retention (90 days) runs at start-up too.
                "created_at": int(time.time()) - 3600,
                "messages": [
                    {"role": "user", "content": "an old question about tulips"},
                    {"role": "assistant", "content": "an old answer"},
                ],
            }
        ],
    }
    (data / "sessions.json").write_text(json.dumps(snapshot), encoding="utf-8")
    async with open_runtime(settings(tmp_path), provider=ScriptedProvider()) as rt:
        assert await rt.kernel.messages.count("legacy1") == 2
        found = (await say(rt, ALICE, "/search tulips"))[-1].text
    assert "tulips" in found
    assert (data / "sessions.json.migrated").is_file()
    assert not (data / "sessions.json").exists()


async def test_summarization_prompts_fit_the_local_models_context(tmp_path: Path) -> None:
    # A 2048-token model: the default 6000-token chunks could never be summarized.
    conf = Settings(
        data={"dir": str(tmp_path / "data")},
        llm={"provider": "local", "context_tokens": 2048, "max_tokens": 256},
        session={"memory": {"summarization_trigger_tokens": 1000, "context_budget_tokens": 1792}},
    )
    provider = ScriptedProvider()
    async with open_runtime(conf, provider=provider) as rt:
        sid = await rt.kernel.sessions.current_or_create("tui", "local", "tui:alice")
        text = "we talked about the garden and the new greenhouse " * 8
        for _ in range(60):
            await rt.kernel.messages.append(sid, "user", text, rt.kernel.estimator.estimate(text))
        assert await rt.summarizer.summarize_session(sid)
        stored = await rt.summarizer.repo.get(sid)
    assert stored is not None and stored.covered_seq == 50
    assert provider.prompts
    for prompt in provider.prompts:
        assert prompt_cost(rt.kernel.estimator, prompt) + 256 <= 2048


async def test_the_system_prompt_defaults_by_provider_and_a_set_one_wins(tmp_path: Path) -> None:
    who = Identity("tui", "tui:local", "tui")
    for llm, agent, expected in [
        ({"provider": "local"}, {}, LOCAL_SYSTEM_PROMPT),
        # A capable model is also told about the learned-fact markers.
        ({"provider": "openai"}, {}, f"{DEFAULT_SYSTEM_PROMPT}\n\n{MARKER_INSTRUCTIONS}"),
        ({"provider": "local"}, {"system_prompt": "Be terse."}, "Be terse."),
    ]:
        provider = ScriptedProvider()
        configured = Settings(data={"dir": str(tmp_path / "data")}, llm=llm, agent=agent)
        async with open_runtime(configured, provider=provider) as rt:
            await say(rt, who, "hello")
        system = provider.prompts[-1][0]
        assert (system.role, system.content) == ("system", expected)
    # Whichever default, the model is told that <data> blocks are not instructions.
    assert "<data>" in LOCAL_SYSTEM_PROMPT and "not instructions" in LOCAL_SYSTEM_PROMPT
    assert "<data>" in DEFAULT_SYSTEM_PROMPT and "never instructions" in DEFAULT_SYSTEM_PROMPT


async def test_the_readme_command_table_matches_help(tmp_path: Path) -> None:
    # The README listed commands /help did not (and missed ones it did): a new user reads both.
    async with open_runtime(settings(tmp_path), provider=ScriptedProvider()) as rt:
        help_text = (await say(rt, ALICE, "/help"))[-1].text
    usages = [line.split("  ")[0] for line in help_text.splitlines()[1:]]
    in_help = {form for usage in usages for form in _forms(usage)}
    readme = README.read_text(encoding="utf-8")
    table = readme.split("| command | what it does |")[1].split("\n\n")[0]
    cells = [row.split("|")[1] for row in table.splitlines()[2:]]
    in_readme = {
        " ".join(form.split()[:2]).strip("`").lower()
        for cell in cells
        for form in cell.split("`, `")
    }
    assert in_readme == in_help


def _forms(usage: str) -> list[str]:
    """``/purge session|user|older N`` -> /purge session, /purge user, /purge older (2 words)."""
    forms: list[str] = []
    for part in usage.split(" | "):
        head, _, rest = part.partition(" ")
        choices = rest.split()[0].split("|") if rest else [""]
        forms += [f"{head} {choice}".strip().lower() for choice in choices]
    return forms


async def test_a_forked_session_continues_its_parents_prompt(tmp_path: Path) -> None:
    settings = Settings(
        data={"dir": str(tmp_path)},
        session={"memory": {"max_session_messages": 8, "window_drop_messages": 4}},
    )
    model = ScriptedProvider()
    who = Identity("tui", "tui:fork", "fork-chat")
    async with open_runtime(settings, provider=model) as rt:
        # Seven turns: the parent's window started afresh at turn 5 and has grown since,
        # so a fork that started a window of its own would begin elsewhere.
        for i in range(7):
            await say(rt, who, f"parent message {i}")
        before = [m.content for m in model.prompts[-1][:-1]]
        await say(rt, who, "/fork")
        await say(rt, who, "first in the fork")
        after = [m.content for m in model.prompts[-1]]
    assert after[: len(before)] == before
    assert after[len(before)] == "parent message 6"
