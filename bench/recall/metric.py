"""The matching rule: is an evidence turn in a prompt, and what the prompt holds.

**Needle.** For each evidence turn, the text PicoBot stored for it (the last user
message of the model call that answered the turn when it was replayed, so secret
redaction is applied exactly as PicoBot applied it), without the ``"Speaker: "``
prefix and the ``" [shares a photo: …]"`` suffix the replay added. A needle shorter
than :data:`MIN_NEEDLE_CHARS` once normalized ("Thanks!") would match almost any
prompt, so such a turn must be found whole, prefix and photo included.

**Haystack.** Every message of the prompt except the last one (the question itself):
the system prompt, the context message with its ``<data>`` blocks, the history window.

**Normalization**, both sides: Unicode NFKC, ``&lt;`` back to ``<`` (PicoBot escapes
data tags inside stored text), every run of whitespace to one space, case folded.

A question is **recalled** when every one of its evidence turns is found. Where each
turn was found is reported too: the ``recalled_conversations`` block, the window (a
history message), the ``learned_facts`` block, or elsewhere (summary, memories).

**Tokens** are counted as ``ceil(chars / 4)``, plus :data:`MESSAGE_OVERHEAD` per
message for the framing: one yardstick for PicoBot and the baselines alike (PicoBot
fits its prompts by its own estimate, :mod:`picobot.text.tokens`).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.recall.dataset import Turn

MIN_NEEDLE_CHARS = 24
MESSAGE_OVERHEAD = 4
RECALLED_SOURCE = "recalled_conversations"
FACTS_SOURCE = "learned_facts"

_SPACE = re.compile(r"\s+")
_BLOCK = re.compile(r'<data source="([^"]*)">\n?(.*?)\n?</data>', re.DOTALL)
_RECALL_ITEM = re.compile(r"(?:user|assistant): ")

Message = Mapping[str, Any]


def normalize(text: str) -> str:
    """The form both sides are compared in (see the module docstring)."""
    text = unicodedata.normalize("NFKC", text).replace("&lt;", "<")
    return _SPACE.sub(" ", text).strip().casefold()


def estimate(text: str) -> int:
    """The yardstick's token count of a text: ``ceil(chars / 4)``."""
    return math.ceil(len(text) / 4)


def content(message: Message) -> str:
    """A wire message's text (a list of parts is joined; anything else is empty)."""
    value = message.get("content")
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(str(p.get("text", "")) for p in value if isinstance(p, dict))
    return ""


def needle(turn: Turn, stored: str | None = None) -> str:
    """What must appear in a prompt for ``turn`` to count as present (normalized)."""
    sent = turn.message()
    whole = stored if stored is not None else sent
    prefix = f"{turn.speaker}: "
    photo = sent[len(prefix) + len(turn.text) :]
    body = whole[len(prefix) :] if whole.startswith(prefix) else whole
    if photo and body.endswith(photo):
        body = body[: -len(photo)]
    found = normalize(body)
    return found if len(found) >= MIN_NEEDLE_CHARS else normalize(whole)


@dataclass(frozen=True, slots=True)
class PromptView:
    """One recorded prompt, taken apart (texts normalized)."""

    tokens: int
    recalled: str
    """The ``recalled_conversations`` block's body, as sent ("" when there is none)."""
    window: str
    other: str
    current: str
    facts: str = ""
    """The ``learned_facts`` block's body, normalized ("" when there is none)."""

    @property
    def haystack(self) -> str:
        """Everything the model saw besides the current message."""
        return "\n".join((self.other, normalize(self.recalled), self.window, self.facts))

    @property
    def recalled_tokens(self) -> int:
        """Estimated tokens of the recalled block (0 when absent)."""
        return estimate(self.recalled) if self.recalled else 0

    def recalled_items(self) -> list[str]:
        """The recalled records: one ``user: text`` or ``assistant: text`` line each
        (the ``On <day>:`` lines head each session's records)."""
        lines = self.recalled.splitlines()
        return [line.strip() for line in lines if _RECALL_ITEM.match(line)]


def view(messages: Sequence[Message]) -> PromptView:
    """Split a prompt into the recalled block, the window and the rest."""
    tokens = sum(estimate(content(m)) + MESSAGE_OVERHEAD for m in messages)
    recalled: list[str] = []
    window: list[str] = []
    other: list[str] = []
    facts: list[str] = []
    body = list(messages[:-1])
    for i, message in enumerate(body):
        text = content(message)
        blocks = list(_BLOCK.finditer(text)) if message.get("role") != "assistant" else []
        if i == 0 and message.get("role") == "system":
            other.append(text)
        elif blocks:
            # The context message: its recalled and facts blocks apart, the rest "other".
            rest = text
            for block in blocks:
                if block.group(1) in (RECALLED_SOURCE, FACTS_SOURCE):
                    (recalled if block.group(1) == RECALLED_SOURCE else facts).append(
                        block.group(2)
                    )
                    rest = rest.replace(block.group(0), "")
            other.append(rest)
        else:
            window.append(text)
    current = content(messages[-1]) if messages else ""
    return PromptView(
        tokens,
        "\n".join(recalled),
        normalize("\n".join(window)),
        normalize("\n".join(other)),
        normalize(current),
        normalize("\n".join(facts)),
    )


@dataclass(slots=True)
class Judgement:
    """What one question's prompt holds of its evidence."""

    hit: bool
    found: dict[str, str | None] = field(default_factory=dict)
    """Evidence id -> "recalled", "window", "facts", "other" or None (missing)."""


def judge(prompt: PromptView, needles: Mapping[str, str]) -> Judgement:
    """Find each evidence needle in the prompt (see the module docstring)."""
    recalled = normalize(prompt.recalled)
    found: dict[str, str | None] = {}
    for dia_id, text in needles.items():
        if text in recalled:
            found[dia_id] = "recalled"
        elif text in prompt.window:
            found[dia_id] = "window"
        elif text in prompt.facts:
            found[dia_id] = "facts"
        elif text in prompt.other:
            found[dia_id] = "other"
        else:
            found[dia_id] = None
    return Judgement(all(v is not None for v in found.values()), found)


def residue(prompt: PromptView, earlier: Iterable[str]) -> list[str]:
    """Earlier questions (normalized texts) that show up in this prompt.

    Texts too short to tell apart from ordinary chat are left out.
    """
    hay = prompt.haystack
    return [q for q in earlier if len(q) >= MIN_NEEDLE_CHARS and q in hay]


def serialize(messages: Sequence[Message]) -> str:
    """A prompt as the text a chat template feeds a model, message by message (as
    ``bench.prompt_cache`` serializes it)."""
    return "".join(f"<|{m.get('role', '')}|>\n{content(m)}\n" for m in messages)


def prefix_share(previous: Sequence[Message], current: Sequence[Message]) -> float:
    """Share of ``current`` (estimated tokens) repeating ``previous`` as a prefix: what
    a model server's prompt cache can reuse."""
    before, after = serialize(previous), serialize(current)
    n = 0
    for a, b in zip(before, after, strict=False):
        if a != b:
            break
        n += 1
    total = estimate(after)
    return round(estimate(after[:n]) / total, 4) if total else 1.0


def duplicate_items(prompt: PromptView) -> int:
    """Recalled records that repeat an earlier one of the same block."""
    items = prompt.recalled_items()
    return len(items) - len(set(items))


def distribution(values: Sequence[float]) -> dict[str, float]:
    """n, mean, median, p95 and max (nearest-rank percentiles)."""
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def rank(p: float) -> float:
        return ordered[max(0, math.ceil(p * len(ordered)) - 1)]

    return {
        "n": len(ordered),
        "mean": round(sum(ordered) / len(ordered), 1),
        "median": rank(0.5),
        "p95": rank(0.95),
        "max": ordered[-1],
    }
