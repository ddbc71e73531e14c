"""How much of each turn's prompt repeats the previous one: what model servers can cache.

``python -m bench.prompt_cache [--turns N] [--ttft-turns N]``; also part of
``python -m bench``. Two measures, each in the same run as its baseline:

- **Prefix share**: a 200-turn chat through the real kernel and memory retriever, with
  memories, a summary (summarization on, a low trigger) and recall from an earlier
  session active; for each turn, the share of its prompt (in estimated tokens) that
  repeats the previous turn's prompt as a prefix. Baseline: the same chat with the
  window sliding one message a turn (``window_drop_messages = 0``).
- **Time to first token** with the bundled local model (skipped without the
  ``local`` extra): a 100-turn chat, median of turns 45-100 over turns 1-5.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picobot.config.settings import Settings
from picobot.llm.base import ChatMessage, LLMProvider
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, OutboundKind
from picobot.runtime import open_runtime
from picobot.store.retrieval.search import SearchIndex
from picobot.text.tokens import ScriptTokenEstimator

USER = Identity("ws", "ws:cache-bench", "cache-bench")
TOPICS = (
    "the lighthouse restoration",
    "my sister's wedding in Porto",
    "training for the autumn half marathon",
    "the sourdough starter called Bubbles",
    "moving the office to the old tram depot",
    "the broken dishwasher and the landlord",
    "a birdwatching trip to the Tagus estuary",
    "learning to play the cello",
)
EST = ScriptTokenEstimator()


def message_text(turn: int) -> str:
    """A deterministic chat message of about 30-60 words on a rotating topic."""
    topic = TOPICS[turn % len(TOPICS)]
    detail = TOPICS[(turn * 3 + 1) % len(TOPICS)]
    return (
        f"Turn {turn}: about {topic}, there is news again. Yesterday we spent the "
        f"afternoon on it and it reminded me of {detail}. What do you think I should do "
        f"next, and do you remember what I told you about {topic} before? "
        + "Some more detail follows so the message has a realistic length. "
        * (1 + turn % 3)
    )


def serialize(prompt: Sequence[ChatMessage]) -> str:
    """A prompt as the text a chat template would feed a model, message by message."""
    return "".join(f"<|{m.role}|>\n{m.content}\n" for m in prompt)


def prefix_share(previous: str, current: str) -> float:
    """Share of ``current`` (in estimated tokens) that repeats ``previous`` as a prefix."""
    n = 0
    for a, b in zip(previous, current, strict=False):
        if a != b:
            break
        n += 1
    total = EST.estimate(current)
    return EST.estimate(current[:n]) / total if total else 1.0


async def _chat(
    data_dir: Path,
    turns: int,
    drop: int,
    provider: LLMProvider,
    memory: dict[str, Any],
    *,
    summarize_every: int = 1,
) -> list[tuple[list[ChatMessage], float]]:
    """Run the chat; each turn's last prompt and time to its first token.

    The summarizer's periodic check runs every ``summarize_every`` turns (the runtime
    runs it every 5 minutes: about 10 turns of a person typing).

    The memories and an earlier session for recall to find are stored first with an
    instant scripted model, so only the measured turns reach ``provider``.
    """
    settings = Settings(
        data={"dir": str(data_dir)},
        llm={"provider": "scripted"},
        session={"memory": {"window_drop_messages": drop, **memory}},
    )
    async with open_runtime(settings, provider=ScriptedProvider()) as rt:
        for fact in ("home: Lisbon", "cat: Pixel, a grey tabby", "job: ferry engineer"):
            await _say(rt.kernel, f"/remember {fact}")
        for turn in range(40):
            await _say(rt.kernel, message_text(1000 + turn))
        await _say(rt.kernel, "/new")
        await SearchIndex(rt.db).index_pending(None)
    out: list[tuple[list[ChatMessage], float]] = []
    async with open_runtime(settings, provider=provider) as rt:
        index = SearchIndex(rt.db)
        recorder = getattr(provider, "prompts", None)
        for turn in range(turns):
            started = time.perf_counter()
            first = await _say(rt.kernel, message_text(turn), first_token=True)
            prompts = recorder if recorder is not None else [[]]
            out.append((list(prompts[-1]), first - started))
            # What the runtime's periodic tasks do between a person's messages.
            await index.index_pending(None)
            if (turn + 1) % summarize_every == 0:
                await rt.summarizer.check_all()
            if recorder is None:
                print(
                    f"turn {turn + 1}: first token after {first - started:.2f} s", file=sys.stderr
                )
    return out


async def _say(kernel: Any, text: str, *, first_token: bool = False) -> float:
    """Send one message; when its first token arrived (perf_counter)."""
    first = 0.0
    async for event in kernel.handle(Inbound(USER, text)):
        if first_token and not first and event.kind == OutboundKind.TOKEN:
            first = time.perf_counter()
    return first or time.perf_counter()


def _shares(prompts: list[list[ChatMessage]]) -> list[float]:
    texts = [serialize(p) for p in prompts]
    return [prefix_share(a, b) for a, b in itertools.pairwise(texts)]


async def prefix_bench(turns: int) -> dict[str, Any]:
    """Median prefix share with block drops vs a sliding window, same chat, same run."""
    memory = {"summarization_trigger_tokens": 3000, "summarization_keep_recent": 10}
    result: dict[str, Any] = {"turns": turns}
    for name, drop in (("blocks", 10), ("sliding", 0)):
        with tempfile.TemporaryDirectory() as tmp:
            chat = await _chat(Path(tmp), turns, drop, ScriptedProvider(), memory)
        shares = _shares([prompt for prompt, _ in chat])
        result[name] = {
            "median_share": round(statistics.median(shares), 3),
            "mean_share": round(statistics.fmean(shares), 3),
            "turns_at_least_0.85": round(sum(s >= 0.85 for s in shares) / len(shares), 3),
            "median_prompt_tokens": statistics.median(EST.estimate(serialize(p)) for p, _ in chat),
        }
    result["median_share_ratio"] = round(
        result["blocks"]["median_share"] / max(result["sliding"]["median_share"], 1e-9), 2
    )
    return result


async def ttft_bench(turns: int) -> dict[str, Any]:
    """Time to first token with the bundled model: turns 45-100 over turns 1-5."""
    try:
        from picobot.llm.local import LocalProvider, bundled_model_path

        bundled_model_path()
    except Exception as exc:  # the local extra is optional
        return {"skipped": f"no bundled local model: {exc}"}
    settings = Settings(llm={"provider": "local", "max_tokens": 16})
    provider = LocalProvider(settings.llm)
    await provider.load()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            chat = await _chat(Path(tmp), turns, 10, provider, {}, summarize_every=10)
    finally:
        await provider.aclose()
    times = [t for _, t in chat]
    early = statistics.median(times[:5])
    late = statistics.median(times[44:100]) if len(times) >= 45 else float("nan")
    return {
        "turns": turns,
        "early_median_s": round(early, 3),
        "late_median_s": round(late, 3),
        "late_over_early": round(late / early, 2) if early else None,
        "max_s": round(max(times), 3),
    }


def run(turns: int, ttft_turns: int, out: Path) -> dict[str, Any]:
    """Both measures; written to ``out/prompt_cache.json``."""
    result: dict[str, Any] = {"prefix": asyncio.run(prefix_bench(turns))}
    if ttft_turns:
        result["ttft"] = asyncio.run(ttft_bench(ttft_turns))
    out.mkdir(parents=True, exist_ok=True)
    (out / "prompt_cache.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def markdown(result: dict[str, Any]) -> str:
    """The figures as a table, with the targets."""
    prefix = result["prefix"]
    rows = [
        "| prompt cache | figure | baseline (same run) | target |",
        "| --- | --- | --- | --- |",
        f"| median prefix share, {prefix['turns']} turns | {prefix['blocks']['median_share']}"
        f" | {prefix['sliding']['median_share']} (sliding window) | >= 0.75 |",
    ]
    ttft = result.get("ttft", {})
    if "late_over_early" in ttft:
        rows.append(
            f"| time to first token, turns 45-100 over 1-5 (bundled model) |"
            f" {ttft['late_over_early']}x ({ttft['late_median_s']} s) |"
            f" {ttft['early_median_s']} s (turns 1-5) | <= 3x |"
        )
    elif ttft:
        rows.append(f"| time to first token | {ttft.get('skipped', 'not run')} | | |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Run both measures and print (and write) the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.prompt_cache")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--ttft-turns", type=int, default=100, help="0 skips it")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    print(markdown(run(args.turns, args.ttft_turns, args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
