"""The ``[memory]`` section: learned facts (``[memory.learning]``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from picobot.config.model import LLMSettings
from picobot.config.sections import Section

_DAY = 86_400


class LearningSettings(Section):
    """Facts the bot learns by itself from conversations (see docs/learning.md)."""

    enabled: bool = True
    """Learn facts from conversations (background extraction, reply markers, /reflect) and
    put them in prompts. Off: nothing is learned, stored facts stay but are not used.
    With the bundled SmolLM2-135M as the background model, learning stays off unless
    with_bundled_model is set: it cannot follow the formats and would invent memories."""
    with_bundled_model: bool = False
    """Learn even when background work ([llm.background], else [llm]) runs on the bundled
    SmolLM2-135M. It writes 0 valid fact lists of 21 and reflections that echo its own
    prompt; what fails the checks is dropped, but little passes. Name a capable model in
    [llm.background] instead."""
    markers: Literal["auto", "on", "off"] = "auto"
    """Tell the chat model it may add [MEMORY:category:subject] lines to replies, while
    learning is on: "auto" does for every model but the bundled SmolLM2-135M, too small to
    follow it; "on" tells that one too. Marker lines are always removed from replies while
    learning is on."""
    idle_secs: int = Field(default=600, ge=1, le=7 * _DAY)
    """Extract facts from a session once it has been idle this many seconds."""
    check_interval_secs: int = Field(default=300, ge=1, le=_DAY)
    """How often the background task looks for idle sessions to learn from."""
    decay_interval_secs: int = Field(default=3600, ge=1, le=7 * _DAY)
    """How often the staleness decay runs."""
    prompt_share: float = Field(default=0.15, ge=0.0, le=0.5)
    """Share of context_budget_tokens the learned-facts block may take."""
    max_prompt_facts: int = Field(default=50, ge=0, le=1000)
    """Most facts considered for one prompt (the most confident)."""
    min_confidence: float = Field(default=0.3, ge=0.0, le=1.0)
    """Facts below this confidence are inactive: kept, but never in a prompt."""
    initial_confidence: float = Field(default=0.7, ge=0.0, le=1.0)
    """Confidence of a newly learned fact."""
    reinforce_step: float = Field(default=0.1, ge=0.0, le=1.0)
    """Added when a fact is observed again (at most 1.0)."""
    contradict_step: float = Field(default=0.3, ge=0.0, le=1.0)
    """Taken off a fact that a newer one replaces."""
    decay_step: float = Field(default=0.1, ge=0.0, le=1.0)
    """Taken off per decay_every_days once a fact is untouched for decay_after_days."""
    decay_after_days: float = Field(default=30.0, ge=0.0, le=36_500.0)
    """Days a fact may stay untouched before it starts to decay (pinned facts never do)."""
    decay_every_days: float = Field(default=7.0, gt=0.0, le=36_500.0)
    """Days per decay step."""
    reflections: bool = True
    """Store a short reflection of each session when it ends (idle, /new, a summary) and
    fold them into per-user digests (docs/learning.md). Needs enabled."""
    reflection_max_words: int = Field(default=120, ge=10, le=400)
    """Longest reflection, in words (a longer answer is cut)."""
    digest_fanout: int = Field(default=10, ge=2, le=100)
    """Rows of one level folded into one digest of the next: reflections into a period
    digest (level 1), period digests into a long-term digest (level 2)."""
    digest_levels: int = Field(default=2, ge=1, le=4)
    """Highest digest level; digests of this level are not folded further."""
    digest_max_tokens: int = Field(default=250, ge=50, le=2000)
    """Longest digest, in estimated tokens (a longer answer is cut)."""
    recall_digests: bool = True
    """Reflections and digests are recall candidates: they may enter a prompt, within the
    recall budget, when they match the message."""
    recall_max_digests: int = Field(default=2, ge=0, le=20)
    """At most this many reflections and digests among one prompt's recalled records (the
    best matching): a digest matches many messages and would crowd out the turns."""


class MemoryRootSettings(Section):
    """Learned memory."""

    learning: LearningSettings = LearningSettings()
    """Learned facts."""


@dataclass(frozen=True, slots=True)
class LearningState:
    """Whether the bot learns by itself, with which model, and why (status, dashboard)."""

    on: bool
    model: str
    """The model that writes facts, reflections and digests (its name or GGUF file)."""
    reason: str
    """One line: why learning is on or off."""

    def describe(self) -> str:
        """``on, with MODEL`` or ``off: REASON``."""
        return f"on, with {self.model}" if self.on else f"off: {self.reason}"


def background_model_name(llm: LLMSettings) -> str:
    """A readable name of the model background work runs on."""
    resolved = llm.for_background() or llm
    if resolved.bundled:
        return "the bundled SmolLM2-135M"
    if resolved.provider == "local":
        return resolved.model_path.rsplit("/", 1)[-1]
    return f"{resolved.provider}:{resolved.model or 'default model'}"


def learning_state(
    learning: LearningSettings, llm: LLMSettings, *, bundled: bool | None = None
) -> LearningState:
    """Learning as configured: off when disabled, or when background work runs on the
    bundled model (``bundled``: as the runtime found it; None = as the settings say)
    without ``with_bundled_model``."""
    model = background_model_name(llm)
    if not learning.enabled:
        return LearningState(False, model, "[memory.learning] enabled = false")
    small = llm.background_bundled if bundled is None else bundled
    if small and not learning.with_bundled_model:
        return LearningState(
            False,
            model,
            "the bundled SmolLM2-135M cannot follow the learning formats; name a capable "
            "model in [llm.background] (or set [memory.learning] with_bundled_model)",
        )
    return LearningState(True, model, "[memory.learning] enabled")
