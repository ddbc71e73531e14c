"""``python -m bench.firstchat`` (``make firstchat``): the bundled model's first chats.

Each of 50 varied first messages (:mod:`bench.first_messages`, fixed seed) is sent by
a fresh user through the same path the TUI takes (:func:`picobot.runtime.open_runtime`,
the kernel and its memory prompt builder, the real local provider) and the reply is
scored: does it end in a repetition loop, did it hit ``max_tokens``, did the
repetition guard stop it, how many words, how long it took. Two configurations run in
the same process: ``before`` (PicoBot's settings before they were tuned for small
models: temperature 0.7, no repeat penalty, top-p 0.95, min-p 0.05, 512 tokens, no
guard, the system prompt that remote models get) and ``now`` (the shipped defaults),
each with a fixed sampling seed, so the figures are reproducible and time per reply is
a ratio to a same-run baseline.
Targets: no reply ends in a loop or at ``max_tokens``; the median reply is under 80 words.

Then, in the same run, a scripted 30-turn chat (:mod:`bench.chat_script`): one user,
``/remember``, ``/new``, ``/resume``, ``/fork``, a message in French and a request for
English, each turn's time to first token as a ratio to the median of turns 1-5. It runs
twice: without kept prompt states (``[llm] prompt_states = 0``) and with the defaults.
Results: ``bench/results/firstchat.json`` and ``firstchat.md`` (the tables, also printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.chat_script import (
    as_rows,
    chat_missed,
    chat_table,
    load_average,
    run_chat,
    summarize_chat,
    turns_table,
)
from bench.first_messages import first_messages
from picobot.config.settings import DEFAULT_SYSTEM_PROMPT, Settings
from picobot.llm.base import ChatMessage, Completion, Finish, LLMProvider, StreamEvent, ToolSpec
from picobot.llm.factory import build_provider
from picobot.llm.repetition import find_loop
from picobot.messages import Identity, Inbound, OutboundKind
from picobot.runtime import open_runtime

RESULTS = Path(__file__).parent / "results"
SAMPLING_SEED = 7
MEDIAN_WORDS_TARGET = 80

CONFIGS: dict[str, dict[str, dict[str, Any]]] = {
    "before": {
        "agent": {"system_prompt": DEFAULT_SYSTEM_PROMPT},
        "llm": {
            "temperature": 0.7,
            "max_tokens": 512,
            "repeat_penalty": 1.0,
            "top_p": 0.95,
            "top_k": 40,
            "min_p": 0.05,
            "stop_on_repetition": False,
        },
    },
    "now": {},
}
"""Settings overrides of each configuration, by section, on top of the defaults (and of
``PICOBOT_*`` variables, which may try other values) and the sampling seed."""
CHAT_CONFIGS: dict[str, int] = {"no kept prompts": 0, "now": 4}
"""The scripted chat's configurations: ``[llm] prompt_states`` of each."""


class FinishRecorder:
    """Passes a provider through, keeping the finish reason of the latest reply."""

    def __init__(self, inner: LLMProvider) -> None:
        self.inner = inner
        self.reason = ""

    @property
    def model_name(self) -> str:
        """The wrapped provider's model name."""
        return self.inner.model_name

    async def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncIterator[StreamEvent]:
        """The wrapped stream, noting its :class:`Finish`."""
        async for event in self.inner.stream(messages, tools):
            if isinstance(event, Finish):
                self.reason = event.reason
            yield event

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> Completion:
        """The wrapped completion."""
        return await self.inner.complete(messages, tools)

    def count_tokens(self, text: str) -> int | None:
        """The wrapped token count."""
        return self.inner.count_tokens(text)

    async def load(self) -> None:
        """Load the wrapped model now, if it loads."""
        load = getattr(self.inner, "load", None)
        if load is not None:
            await load()

    async def aclose(self) -> None:
        """Close the wrapped provider."""
        await self.inner.aclose()


@dataclass(frozen=True, slots=True)
class Reply:
    """One first message and what came back."""

    message: str
    reply: str
    finish: str
    words: int
    loop: bool
    secs: float


async def run_config(
    name: str, messages: list[str], data_dir: Path, sampling_seed: int = SAMPLING_SEED
) -> list[Reply]:
    """Send every message as a new user's first message under configuration ``name``."""
    overrides = CONFIGS[name]
    settings = Settings(
        data={"dir": str(data_dir)},
        llm={"provider": "local", "seed": sampling_seed, **overrides.get("llm", {})},
        session={"memory": {"enable_summarization": False}},
        logging={"level": "WARNING"},
        **{k: v for k, v in overrides.items() if k != "llm"},
    )
    recorder = FinishRecorder(build_provider(settings.llm))
    replies: list[Reply] = []
    async with open_runtime(settings, provider=recorder, warm_up=True) as runtime:
        for i, message in enumerate(messages):
            who = Identity("tui", f"tui:{name}-{i}", f"bench-{name}-{i}")
            recorder.reason = ""
            reply = ""
            started = time.perf_counter()
            async for event in runtime.kernel.handle(Inbound(who, message)):
                if event.kind in (OutboundKind.DONE, OutboundKind.ERROR):
                    reply = event.text
            secs = time.perf_counter() - started
            # A reply cut at max_tokens may end mid-word: look with and without its last word.
            loop = find_loop(reply) is not None or find_loop(reply, complete=False) is not None
            replies.append(Reply(message, reply, recorder.reason, len(reply.split()), loop, secs))
    return replies


def summarize(replies: list[Reply], baseline_secs: float | None) -> dict[str, Any]:
    """The figures of one configuration."""
    n = len(replies)
    words = sorted(r.words for r in replies)
    secs = statistics.fmean(r.secs for r in replies)
    return {
        "replies": n,
        "loop_share": sum(r.loop for r in replies) / n,
        "max_tokens_share": sum(r.finish == "length" for r in replies) / n,
        "guard_share": sum(r.finish == "repetition" for r in replies) / n,
        "median_words": statistics.median(words),
        "p95_words": words[min(n - 1, round(0.95 * (n - 1)))],
        "secs_per_reply": secs,
        "secs_ratio": secs / baseline_secs if baseline_secs else 1.0,
    }


def table(summary: dict[str, dict[str, Any]]) -> str:
    """A Markdown table of the configurations."""
    lines = [
        "| config | loops | hit max_tokens | stopped by guard | median words | p95 words"
        " | s/reply | time vs before |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        lines.append(
            f"| {name} | {s['loop_share']:.0%} | {s['max_tokens_share']:.0%}"
            f" | {s['guard_share']:.0%} | {s['median_words']:g} | {s['p95_words']}"
            f" | {s['secs_per_reply']:.2f} | {s['secs_ratio']:.2f} |"
        )
    return "\n".join(lines)


async def run(
    names: list[str], count: int, seed: int, sampling_seed: int = SAMPLING_SEED
) -> dict[str, Any]:
    """Run the configurations; return the report (settings, figures, every reply)."""
    messages = first_messages(count, seed)
    results: dict[str, list[Reply]] = {}
    with tempfile.TemporaryDirectory(prefix="picobot-firstchat-") as tmp:
        for name in names:
            print(f"running {name} ({len(messages)} first messages)...", file=sys.stderr)
            results[name] = await run_config(name, messages, Path(tmp) / name, sampling_seed)
    summary: dict[str, dict[str, Any]] = {}
    baseline = None
    for name, replies in results.items():
        summary[name] = summarize(replies, baseline)
        baseline = baseline or summary[name]["secs_per_reply"]
    return {
        "messages": count,
        "message_seed": seed,
        "sampling_seed": sampling_seed,
        "configs": {name: CONFIGS[name] for name in names},
        "summary": summary,
        "replies": {name: [asdict(r) for r in replies] for name, replies in results.items()},
    }


async def run_chats(names: list[str], sampling_seed: int) -> dict[str, Any]:
    """Play the scripted chat under each configuration; return the report."""
    turns = {}
    with tempfile.TemporaryDirectory(prefix="picobot-firstchat-chat-") as tmp:
        for name in names:
            print(f"running the scripted chat ({name})...", file=sys.stderr)
            turns[name] = await run_chat(
                Path(tmp) / name.replace(" ", "-"),
                prompt_states=CHAT_CONFIGS[name],
                sampling_seed=sampling_seed,
            )
    return {
        "sampling_seed": sampling_seed,
        "configs": {name: {"llm": {"prompt_states": CHAT_CONFIGS[name]}} for name in names},
        "summary": {name: summarize_chat(t) for name, t in turns.items()},
        "turns": {name: as_rows(t) for name, t in turns.items()},
        "tables": {
            name: turns_table(t, summarize_chat(t)["baseline_ttft_secs"])
            for name, t in turns.items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Run, print the tables, write the results; exit 1 when ``now`` misses a target."""
    parser = argparse.ArgumentParser(prog="python -m bench.firstchat", description=__doc__)
    parser.add_argument("--messages", type=int, default=50, help="first messages (default 50)")
    parser.add_argument("--seed", type=int, default=2026, help="seed of the messages")
    parser.add_argument(
        "--sampling-seed", type=int, default=SAMPLING_SEED, help="seed of the model's sampling"
    )
    parser.add_argument("--only-now", action="store_true", help="skip the baselines")
    parser.add_argument(
        "--part",
        choices=("all", "first", "chat"),
        default="all",
        help="the first messages, the scripted chat, or both (default)",
    )
    args = parser.parse_args(argv)
    load = {"before": load_average()}
    report: dict[str, Any] = {}
    sections = ["# First chats with the bundled model"]
    missed = False
    if args.part in ("all", "first"):
        names = ["now"] if args.only_now else ["before", "now"]
        report = asyncio.run(run(names, args.messages, args.seed, args.sampling_seed))
        text = table(report["summary"])
        print(text)
        sections.append(f"## First messages\n\n{text}")
        now = report["summary"]["now"]
        missed = bool(
            now["loop_share"]
            or now["max_tokens_share"]
            or now["median_words"] >= MEDIAN_WORDS_TARGET
        )
    if args.part in ("all", "chat"):
        names = ["now"] if args.only_now else list(CHAT_CONFIGS)
        chat = asyncio.run(run_chats(names, args.sampling_seed))
        report["chat"] = chat
        text = chat_table(chat["summary"])
        print(f"\n{text}")
        sections.append(f"## A scripted 30-turn chat\n\n{text}")
        for name, turns in chat["tables"].items():
            sections.append(f"### Turns ({name})\n\n{turns}")
        missed = missed or chat_missed(chat["summary"]["now"])
    load["after"] = load_average()
    report["load_average"] = load
    sections.append(f"Load average (1, 5, 15 min): {load['before']} before, {load['after']} after.")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "firstchat.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    (RESULTS / "firstchat.md").write_text("\n\n".join(sections) + "\n")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
