"""The scripted 30-turn chat of ``python -m bench.firstchat``: the bundled model's first hour.

One user, Maya, a nurse in Porto, chats through the same path the terminal UI takes
(:func:`picobot.runtime.open_runtime`, the kernel, the real local provider): she gives
her name, city and job, saves two notes with ``/remember``, writes once in French and
then asks for English, starts a new session, resumes the first one, forks it, resumes
the second, saves a third note, and asks questions whose answers are in her notes.

Every turn records its time to first token (from sending the message to the model's
first token, before the repetition guard holds text back; and to the first text shown),
the prompt tokens the model evaluated, and the reply, scored by :mod:`bench.chat_scores`.
Targets: no turn's time to first token over 4x the median of turns 1-5; no reply that
claims Maya's name, city or job as the bot's own; no reply that says her message back;
every reply after the request for English in English.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.chat_scores import Persona, identity_claims, is_echo, language
from picobot.config.settings import Settings
from picobot.llm.factory import build_provider
from picobot.llm.local import LocalProvider
from picobot.messages import Identity, Inbound, OutboundKind
from picobot.runtime import open_runtime

PERSONA = Persona(name="Maya", city="Porto", job="nurse")
TTFT_RATIO_TARGET = 4.0
BASELINE_TURNS = 5
"""The median time to first token of turns 1-5 is what every turn is compared with."""
ENGLISH_REQUEST = "Answer in English please."


@dataclass(frozen=True, slots=True)
class Step:
    """One line typed: a chat message or a command (``{A}`` names a session's id)."""

    text: str
    names: str | None = None
    """The name the session current after this step gets, for a later ``/resume``."""


SCRIPT: tuple[Step, ...] = (
    Step("Hi! My name is Maya. I live in Porto and I work as a nurse.", names="A"),
    Step("I just finished a night shift. Any tips to fall asleep during the day?"),
    Step("What could I cook for dinner tonight? Something quick."),
    Step("Do you have a name?"),
    Step("Tell me something fun about the sea."),
    Step("/remember name: My name is Maya"),
    Step("/remember work: I live in Porto and work as a nurse at the city hospital"),
    Step("What do you know about me?"),
    Step("Where do I live?"),
    Step("Bonjour ! Je cherche des idées pour un week-end tranquille à la maison."),
    Step(f"{ENGLISH_REQUEST} What could I do this weekend?"),
    Step("Suggest a book for a rainy afternoon."),
    Step("/new", names="B"),
    Step("Hello again! What is my job?"),
    Step("Give me three tips for staying awake on a night shift."),
    Step("I'm thinking of learning the guitar. Is that a good idea?"),
    Step("Which city do I live in?"),
    Step("Write a two-line poem about the morning."),
    Step("/resume {A}"),
    Step("I'm back. What were we talking about?"),
    Step("What's my name?"),
    Step("Any idea for a short walk in my city?"),
    Step("/fork", names="C"),
    Step("Let's plan a picnic. What should I bring?"),
    Step("What do I do for a living?"),
    Step("And a dessert for the picnic?"),
    Step("/resume {B}"),
    Step("Back to the guitar: how long does it take to learn a first song?"),
    Step("/remember pet: I have a cat called Pixel"),
    Step("What is my cat's name?"),
    Step("Can you sum up what you know about me?"),
    Step("/resume {A}"),
    Step("One more question: how do I make a good cup of tea?"),
    Step("Where do I work?"),
    Step("Tell me a short joke."),
    Step("/fork", names="D"),
    Step("What's my name, and where do I live?"),
    Step("Any tips for a calm evening after work?"),
    Step("Goodbye, and thank you!"),
)


@dataclass(frozen=True, slots=True)
class Turn:
    """One chat turn of the script and how it went."""

    turn: int
    after: str
    """The commands typed since the previous turn (``/resume``, ``/new`` ...), if any."""
    session: str
    message: str
    reply: str
    ttft_secs: float | None
    """From sending the message to the model's first token (None: no token)."""
    prompt_secs: float | None
    """From sending the message to the model starting to read the prompt (the kernel's
    share of the wait: the session, the prompt's reads, recall)."""
    shown_secs: float | None
    """From sending the message to the first text the chat showed."""
    secs: float
    prompt_tokens: int | None
    evaluated_tokens: int | None
    restored: bool
    claims: list[str] = field(default_factory=list)
    echo: bool = False
    language: str = "unknown"


async def run_chat(data_dir: Path, *, prompt_states: int, sampling_seed: int) -> list[Turn]:
    """Play :data:`SCRIPT` with ``[llm] prompt_states`` set; every chat turn, scored."""
    settings = Settings(
        data={"dir": str(data_dir)},
        llm={"provider": "local", "seed": sampling_seed, "prompt_states": prompt_states},
        logging={"level": "WARNING"},
    )
    provider = build_provider(settings.llm)
    assert isinstance(provider, LocalProvider), "the scripted chat needs the local provider"
    who = Identity("tui", "tui:maya", "bench-maya")
    sessions: dict[str, str] = {}
    names: dict[str, str] = {}  # session id -> its name in the script
    current = ""
    after: list[str] = []
    turns: list[Turn] = []
    async with open_runtime(settings, provider=provider, warm_up=True) as runtime:
        for step in SCRIPT:
            text = step.text.format(**sessions)
            command = text.startswith("/")
            started = time.perf_counter()
            shown: float | None = None
            reply = ""
            async for event in runtime.kernel.handle(Inbound(who, text)):
                if event.kind is OutboundKind.SESSION and event.session_id:
                    current = event.session_id
                elif event.kind is OutboundKind.TOKEN and shown is None:
                    shown = time.perf_counter() - started
                elif event.kind is OutboundKind.ERROR:
                    raise RuntimeError(f"{text!r} failed: {event.text}")
                elif event.kind is OutboundKind.DONE:
                    reply = event.text
            secs = time.perf_counter() - started
            if step.names is not None:
                sessions[step.names] = current
                names[current] = step.names
            if command:
                after.append(text.split()[0])
                continue
            first, began = provider.first_token_at, provider.read_started_at
            read = provider.last_read
            turns.append(
                Turn(
                    turn=len(turns) + 1,
                    after=" ".join(after),
                    session=names.get(current, "?"),
                    message=text,
                    reply=reply,
                    ttft_secs=first - started if first is not None else None,
                    prompt_secs=began - started if began is not None else None,
                    shown_secs=shown,
                    secs=secs,
                    prompt_tokens=read.prompt_tokens if read else None,
                    evaluated_tokens=read.evaluated_tokens if read else None,
                    restored=read.restored if read else False,
                    claims=identity_claims(reply, PERSONA),
                    echo=is_echo(text, reply),
                    language=language(reply),
                )
            )
            after = []
    return turns


def english_from(turns: list[Turn]) -> int:
    """The turn that asks for English: it and every later one should be in English."""
    return next(t.turn for t in turns if t.message.startswith(ENGLISH_REQUEST))


def summarize_chat(turns: list[Turn]) -> dict[str, Any]:
    """The chat's figures against its targets."""
    timed = [t for t in turns if t.ttft_secs is not None]
    baseline = statistics.median(t.ttft_secs for t in timed[:BASELINE_TURNS] if t.ttft_secs)
    ratios = {t.turn: (t.ttft_secs or 0.0) / baseline for t in timed}
    over = [n for n, r in ratios.items() if r > TTFT_RATIO_TARGET]
    switched = [t for t in turns if t.after]
    # The same ratio in evaluated tokens: what the wait is made of, whatever the load.
    counted = [t for t in turns if t.evaluated_tokens is not None]
    usual = statistics.median(t.evaluated_tokens or 0 for t in counted[:BASELINE_TURNS])
    token_ratios = {t.turn: (t.evaluated_tokens or 0) / usual for t in counted}
    asked = english_from(turns)
    later = [t for t in turns if t.turn >= asked]
    return {
        "turns": len(turns),
        "baseline_ttft_secs": baseline,
        "max_ttft_ratio": max(ratios.values()),
        "max_ttft_turn": max(ratios, key=lambda n: ratios[n]),
        "turns_over_4x": over,
        "baseline_evaluated_tokens": usual,
        "max_evaluated_ratio": max(token_ratios.values()),
        "turns_over_4x_evaluated": [n for n, r in token_ratios.items() if r > TTFT_RATIO_TARGET],
        "restored_turns": [t.turn for t in turns if t.restored],
        "evaluated_tokens": sum(t.evaluated_tokens or 0 for t in turns),
        "after_switch": [
            {
                "turn": t.turn,
                "after": t.after,
                "ttft_secs": t.ttft_secs,
                "ratio": ratios.get(t.turn),
                "prompt_tokens": t.prompt_tokens,
                "evaluated_tokens": t.evaluated_tokens,
                "restored": t.restored,
            }
            for t in switched
        ],
        "identity_claims": sum(bool(t.claims) for t in turns),
        "claim_turns": {t.turn: t.claims for t in turns if t.claims},
        "echoes": sum(t.echo for t in turns),
        "echo_turns": [t.turn for t in turns if t.echo],
        "english_from_turn": asked,
        "english_replies": sum(t.language == "en" for t in later),
        "other_language_turns": {
            t.turn: t.language for t in later if t.language not in ("en", "unknown")
        },
        "unknown_language_turns": [t.turn for t in later if t.language == "unknown"],
        "replies_checked_for_english": len(later),
        "median_evaluated_tokens": statistics.median(
            t.evaluated_tokens for t in turns if t.evaluated_tokens is not None
        ),
    }


def chat_missed(summary: dict[str, Any]) -> bool:
    """Whether a chat's figures miss a target."""
    return bool(
        summary["turns_over_4x"]
        or summary["identity_claims"]
        or summary["echoes"]
        or summary["other_language_turns"]
    )


def chat_table(summaries: dict[str, dict[str, Any]]) -> str:
    """A Markdown table of the chat's figures per configuration."""
    lines = [
        "| config | TTFT median turns 1-5 | max TTFT ratio (turn) | turns over 4x"
        " | tokens evaluated (all turns) | turns over 4x in tokens | restored"
        " | identity claims | echoes | English after the request |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summaries.items():
        over = ", ".join(str(n) for n in s["turns_over_4x"]) or "none"
        over_tokens = ", ".join(str(n) for n in s["turns_over_4x_evaluated"]) or "none"
        restored = ", ".join(str(n) for n in s["restored_turns"]) or "none"
        lines.append(
            f"| {name} | {s['baseline_ttft_secs']:.2f} s | {s['max_ttft_ratio']:.1f}x"
            f" ({s['max_ttft_turn']}) | {over} | {s['evaluated_tokens']:,} | {over_tokens}"
            f" | {restored} | {s['identity_claims']} | {s['echoes']}"
            f" | {s['english_replies']}/{s['replies_checked_for_english']} |"
        )
    return "\n".join(lines)


def turns_table(turns: list[Turn], baseline: float) -> str:
    """A Markdown table of every turn: what came before, TTFT and its ratio, tokens."""
    lines = [
        "| turn | session | after | TTFT | ratio | before the model | prompt tokens | evaluated"
        " | restored | claims | echo | language |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in turns:
        ttft = f"{t.ttft_secs:.2f} s" if t.ttft_secs is not None else "-"
        ratio = f"{t.ttft_secs / baseline:.1f}x" if t.ttft_secs is not None else "-"
        kernel = f"{t.prompt_secs:.2f} s" if t.prompt_secs is not None else "-"
        lines.append(
            f"| {t.turn} | {t.session} | {t.after} | {ttft} | {ratio} | {kernel}"
            f" | {t.prompt_tokens}"
            f" | {t.evaluated_tokens} | {'yes' if t.restored else ''}"
            f" | {', '.join(t.claims)} | {'yes' if t.echo else ''} | {t.language} |"
        )
    return "\n".join(lines)


def load_average() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages (empty where unknown)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def as_rows(turns: list[Turn]) -> list[dict[str, Any]]:
    """The turns as JSON objects."""
    return [asdict(t) for t in turns]
