"""/recall, /learning and /privacy through the whole runtime: stored, shown, honoured at once."""

from __future__ import annotations

import json
from pathlib import Path

from picobot.config.settings import Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, Outbound, OutboundKind
from picobot.privacy.export import iter_user_jsonl
from picobot.runtime import Runtime, open_runtime
from picobot.store.retrieval.search import SearchIndex
from tests.kernel.test_recall_each_message import DENTIST

ALICE = Identity("ws", "ws:alice", "alice")
BOB = Identity("ws", "ws:bob", "bob")


async def say(rt: Runtime, text: str, who: Identity = ALICE) -> list[Outbound]:
    events = [e async for e in rt.kernel.handle(Inbound(who, text))]
    await SearchIndex(rt.db).index_pending(None)  # as the runtime's indexer does
    return events


def recalled(provider: ScriptedProvider) -> bool:
    return any("Quokkaberg" in m.content for m in provider.prompts[-1])


async def test_recall_off_leaves_recalled_records_out_of_the_next_prompt(tmp_path: Path) -> None:
    provider = ScriptedProvider(["Noted."] * 20)
    settings = Settings(data={"dir": str(tmp_path)}, llm={"provider": "scripted"})
    async with open_runtime(settings, provider=provider) as rt:
        await say(rt, DENTIST)
        await say(rt, "/new")
        await say(rt, "Which dentist did I mention before?")
        assert recalled(provider)
        off = await say(rt, "/recall off")
        assert off[-1].kind == OutboundKind.NOTICE and off[-1].text.startswith("Recall is off")
        # The same session and epoch: the prompt must not keep the old records.
        await say(rt, "Which dentist did I mention before?")
        assert not recalled(provider)
        status = (await say(rt, "/privacy"))[-1].text
        assert "recall off" in status and "learning on" in status
        assert "recall on" in (await say(rt, "/privacy", BOB))[-1].text  # Bob's own switch
        await say(rt, "/recall on")
        await say(rt, "Which dentist did I mention before?")
        assert recalled(provider)
    # Stored: a restart keeps the switch.
    async with open_runtime(settings, provider=provider) as rt:
        await say(rt, "/learning off")
        assert "learning off" in (await say(rt, "/privacy"))[-1].text
    async with open_runtime(settings, provider=provider) as rt:
        assert "learning off" in (await say(rt, "/privacy"))[-1].text


async def test_a_wrong_argument_gets_the_usage_and_changes_nothing(tmp_path: Path) -> None:
    settings = Settings(data={"dir": str(tmp_path)}, llm={"provider": "scripted"})
    async with open_runtime(settings, provider=ScriptedProvider()) as rt:
        wrong = await say(rt, "/recall maybe")
        assert wrong[-1].kind == OutboundKind.ERROR and "/recall off" in wrong[-1].text
        again = await say(rt, "/recall on")
        assert again[-1].text.startswith("Recall is already on")


async def test_a_sensitive_note_stays_out_of_the_prompt_and_recall(tmp_path: Path) -> None:
    provider = ScriptedProvider(["Noted."] * 20)
    settings = Settings(data={"dir": str(tmp_path)}, llm={"provider": "scripted"})
    async with open_runtime(settings, provider=provider) as rt:
        saved = await say(rt, "/remember --sensitive clinic: Doctor Quokkaberg treats me")
        assert "sensitive" in saved[-1].text
        await say(rt, "/remember pet: a cat named Tom")
        await say(rt, "Which clinic, Quokkaberg? And my cat?")
        prompt = provider.prompts[-1]
        assert any("Tom" in m.content for m in prompt)
        # Only the message itself names it: no note line, no recalled record.
        assert sum("Quokkaberg" in m.content for m in prompt) == 1
        assert "Doctor Quokkaberg" not in " ".join(m.content for m in prompt)
        search = rt.services.search
        found = await search.hits("ws:alice", search.terms("Quokkaberg doctor treats"), 10)
        assert found and all(h.kind != "memory" for h in found)  # the message, not the note
        listed = (await say(rt, "/memories"))[-1].text
        assert "clinic (sensitive): Doctor Quokkaberg" in listed
        lines = [json.loads(line) async for line in iter_user_jsonl(rt.db, "ws:alice")]
        notes = {r["key"]: r["sensitive"] for r in lines if r["type"] == "memory"}
        assert notes == {"clinic": True, "pet": False}
        # Let back in: the next prompt holds it.
        await say(rt, "/sensitive off clinic")
        await say(rt, "Which clinic was it?")
        assert any("Doctor Quokkaberg" in m.content for m in provider.prompts[-1])
        await say(rt, "/sensitive clinic")
        await say(rt, "Which clinic was it again?")
        assert not any("Doctor Quokkaberg" in m.content for m in provider.prompts[-1])
        missing = await say(rt, "/sensitive nothing-here")
        assert missing[-1].kind == OutboundKind.ERROR
