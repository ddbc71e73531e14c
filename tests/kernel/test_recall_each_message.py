"""Recall for every message of a continuing session, through the whole runtime."""

from __future__ import annotations

from pathlib import Path

from picobot.config.settings import Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound
from picobot.runtime import Runtime, open_runtime
from picobot.store.retrieval.search import SearchIndex

ALICE = Identity("ws", "ws:alice", "alice")
DENTIST = (
    "My dentist is Doctor Quokkaberg. Her practice is on the corner by the old cinema, "
    "she always runs late on Tuesdays, and last time she said my left molar needs "
    "watching, so I should book a check-up in the spring before the insurance renews."
)


async def say(rt: Runtime, text: str) -> None:
    async for _event in rt.kernel.handle(Inbound(ALICE, text)):
        pass
    await SearchIndex(rt.db).index_pending(None)  # as the runtime's indexer does


def long_message(i: int) -> str:
    return (
        f"Message {i} of a long afternoon: the garden shed needs a new roof, the gutters "
        "are full of leaves again and the neighbour's ladder is still in our yard. "
        + "We talked about paint colours, timber prices and the weather forecast. "
        * 6
    )


async def test_a_fact_from_an_earlier_session_reaches_the_25th_message(tmp_path: Path) -> None:
    provider = ScriptedProvider(["Noted."] * 100)
    settings = Settings(data={"dir": str(tmp_path)}, llm={"provider": "scripted"})
    async with open_runtime(settings, provider=provider) as rt:
        await say(rt, DENTIST)
        await say(rt, "/new")
        for i in range(24):
            await say(rt, long_message(i))
        # The window is full of long messages by now; the old design left this
        # message no recall at all.
        await say(rt, "Which dentist did I mention before?")
    prompt = provider.prompts[-1]
    assert prompt[-1].content == "Which dentist did I mention before?"
    assert "Quokkaberg" in prompt[-2].content  # the recalled block, right before it
    assert sum("Quokkaberg" in m.content for m in prompt) == 1
