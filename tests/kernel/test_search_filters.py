"""/search and memory_search with type, session and since filters, facts and reflections too."""

from __future__ import annotations

import time
from pathlib import Path

from picobot.access.context import ToolContext
from picobot.config.settings import Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, Outbound, OutboundKind
from picobot.runtime import Runtime, open_runtime
from picobot.store.learned.digests import DigestStore, Provenance
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.retrieval.search import SearchIndex
from picobot.tools.memory_search import MemorySearchTool

ALICE = Identity("ws", "ws:alice", "alice")


async def say(rt: Runtime, text: str) -> list[Outbound]:
    return [e async for e in rt.kernel.handle(Inbound(ALICE, text))]


async def alice_with_everything(rt: Runtime) -> tuple[str, str]:
    """Two sessions of Alice's (the first mentions the pineapple), a note, a fact and a
    reflection of the first session."""
    first = (await say(rt, "I love pineapple pizza"))[0].session_id
    await say(rt, "/remember food: pineapple pizza")
    second = (await say(rt, "/new"))[0].session_id
    await say(rt, "tell me about volcanoes")
    assert first is not None and second is not None
    fact = Observation(None, "preference", "orders pineapple pizza on Fridays")
    await FactStore(rt.db).observe(
        "ws:alice", [fact], session_id=first, message_id=1, now=time.time()
    )
    source = Provenance(first, 1, 2, 1, 2)
    text = "Talked about pineapple pizza toppings."
    await DigestStore(rt.db).add_reflection("ws:alice", source, text, 5, now=time.time())
    return first, second


def kinds(listing: str) -> set[str]:
    return {line.split("[")[1].split("]")[0] for line in listing.splitlines()[1:]}


async def test_search_finds_facts_and_reflections_and_takes_filters(tmp_path: Path) -> None:
    settings = Settings(data={"dir": str(tmp_path)}, llm={"provider": "scripted"})
    async with open_runtime(settings, provider=ScriptedProvider(["Noted."] * 10)) as rt:
        first, second = await alice_with_everything(rt)
        every = (await say(rt, "/search pineapple"))[-1].text
        assert kinds(every) == {"message", "memory", "fact", "reflection"}
        learned = (await say(rt, "/search type:facts,reflections pineapple"))[-1].text
        assert kinds(learned) == {"fact", "reflection"}
        assert kinds((await say(rt, "/search type:notes pineapple"))[-1].text) == {"memory"}
        in_first = (await say(rt, f"/search session:{first} pineapple"))[-1].text
        assert kinds(in_first) == {"message", "reflection"}
        in_second = (await say(rt, f"/search session:{second} pineapple"))[-1].text
        assert in_second.startswith("No matches")
        future = (await say(rt, "/search since:2999-01-01 pineapple"))[-1].text
        assert future.startswith("No matches")
        assert kinds((await say(rt, "/search since:1d pineapple"))[-1].text) == kinds(every)
        for bad in ("type:gossip pineapple", "since:soon pineapple", "type:facts"):
            error = (await say(rt, f"/search {bad}"))[-1]
            assert error.kind == OutboundKind.ERROR, bad


async def test_memory_search_takes_the_same_filters(tmp_path: Path) -> None:
    settings = Settings(data={"dir": str(tmp_path)}, llm={"provider": "scripted"})
    async with open_runtime(settings, provider=ScriptedProvider(["Noted."] * 10)) as rt:
        first, _ = await alice_with_everything(rt)
        tool = MemorySearchTool(SearchIndex(rt.db), terms=rt.services.search.terms)
        ctx = ToolContext(user_id="ws:alice", session_id=None, channel="ws")
        facts = await tool.run(ctx, {"query": "pineapple", "type": "facts"})
        assert kinds("\n" + facts) == {"fact"}
        reflections = await tool.run(
            ctx, {"query": "pineapple", "type": "reflections", "session": first, "since": "7d"}
        )
        assert kinds("\n" + reflections) == {"reflection"}
        plain = await tool.run(ctx, {"query": "pineapple"})
        assert "message" in kinds("\n" + plain)
