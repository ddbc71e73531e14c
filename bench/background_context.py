"""``python -m bench.background_context``: a chat turn's wait after background work.

With the bundled model in process, a turn's time to first token (TTFT) is measured
before and after one background call (a reflection-sized prompt), in two layouts in the
same process: ``shared`` (background work on the chat's own llama.cpp context, as before
[llm.background] existed) and ``second`` (on a context of its own, what PicoBot does now:
:func:`picobot.llm.factory.build_background_provider`). The figure is each layout's
after/before ratio; the chat's prompt is about 650 tokens, which a context that lost it
reads again. Needs the ``[local]`` extra; a few seconds a round on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Sequence

from picobot.config.settings import LLMSettings
from picobot.llm.base import ChatMessage, LLMProvider, TextDelta
from picobot.llm.factory import build_background_provider
from picobot.llm.local import LocalProvider

SYSTEM = ChatMessage("system", "You are PicoBot, a friendly assistant. Answer briefly.")
BACKGROUND = [
    ChatMessage("system", "You write a short reflection on a conversation."),
    ChatMessage(
        "user",
        "\n".join(f"[#{i} user] we hiked in the hills near Porto, day {i}" for i in range(30))
        + "\nWrite the reflection now.",
    ),
]


def history() -> list[ChatMessage]:
    """Twelve exchanges of chat (about 650 tokens with the system prompt)."""
    out = [SYSTEM]
    for i in range(12):
        out.append(
            ChatMessage(
                "user",
                f"Message {i}: I went to the market in Lisbon and bought {i} oranges, "
                "some bread and green tea for my mother who lives near the river.",
            )
        )
        out.append(ChatMessage("assistant", f"Lovely: {i} oranges, and tea for your mother."))
    return out


async def ttft(provider: LLMProvider, messages: list[ChatMessage]) -> float:
    """Seconds until the first text of a reply (the rest is not waited for)."""
    start = time.perf_counter()
    async with contextlib.aclosing(provider.stream(messages)) as events:
        async for event in events:
            if isinstance(event, TextDelta):
                return time.perf_counter() - start
    return time.perf_counter() - start


async def one_round(layout: str) -> tuple[float, float]:
    """TTFT of a cached turn before and after one background call, in ``layout``."""
    settings = LLMSettings(max_tokens=24, seed=1)
    chat = LocalProvider(settings)
    background = build_background_provider(settings, chat) if layout == "second" else chat
    try:
        turn = [*history(), ChatMessage("user", "What did I buy?")]
        await ttft(chat, turn)  # the first read of the prompt
        turn += [ChatMessage("assistant", "Oranges."), ChatMessage("user", "For whom?")]
        before = await ttft(chat, turn)
        await background.complete(BACKGROUND)
        turn += [ChatMessage("assistant", "Your mother."), ChatMessage("user", "Where?")]
        after = await ttft(chat, turn)
        return before, after
    finally:
        await chat.aclose()
        if background is not chat:
            await background.aclose()


async def run(rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Alternating rounds of both layouts, so machine load touches both alike."""
    found: dict[str, list[tuple[float, float]]] = {"shared": [], "second": []}
    for _ in range(rounds):
        for layout in found:
            found[layout].append(await one_round(layout))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Print each layout's TTFT before and after background work, and their ratio."""
    parser = argparse.ArgumentParser(prog="python -m bench.background_context")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each layout")
    args = parser.parse_args(argv)
    for layout, pairs in asyncio.run(run(args.rounds)).items():
        before = statistics.median(b for b, _ in pairs)
        after = statistics.median(a for _, a in pairs)
        print(
            f"{layout:>6}: TTFT before {before:.2f} s, after background work {after:.2f} s "
            f"({after / before:.1f}x)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
