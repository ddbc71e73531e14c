"""The assembled runtime with [embeddings] provider = "local": the real model, end to end."""

from __future__ import annotations

import asyncio
from pathlib import Path

from picobot.config.settings import Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, Outbound
from picobot.runtime import INDEX_INTERVAL_SECS, Runtime, open_runtime
from picobot.store.retrieval.vectors import vector_count

ALICE = Identity("tui", "tui:alice", "local")


async def say(rt: Runtime, text: str) -> list[Outbound]:
    return [e async for e in rt.kernel.handle(Inbound(ALICE, text))]


async def until_embedded(rt: Runtime, count: int) -> None:
    """Wait for the runtime's vector indexer (nothing else writes vectors)."""
    async with asyncio.timeout(600 * INDEX_INTERVAL_SECS):
        while await rt.db.read(vector_count) < count:  # noqa: ASYNC110 - rows, no event
            await asyncio.sleep(0.05)


async def test_a_paraphrased_question_recalls_by_meaning(tmp_path: Path) -> None:
    cfg = Settings(data={"dir": str(tmp_path / "data")}, embeddings={"provider": "local"})
    provider = ScriptedProvider(["Noted, Doctor Quokkaberg it is."])
    async with open_runtime(cfg, provider=provider) as rt:
        await say(rt, "My dentist is Doctor Quokkaberg")
        await say(rt, "/new")
        # The message, the reply: the indexer stores both (the message's own vector
        # comes from its turn, not from a second embedding).
        await until_embedded(rt, 2)
        await say(rt, "Who takes care of my teeth?")
        prompt = provider.prompts[-1]
        assert "vector-index" in rt.tasks.status()
    assert "Quokkaberg" in str(prompt[:-1])
