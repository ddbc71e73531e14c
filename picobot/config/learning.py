"""The ``[memory]`` section: learned facts (``[memory.learning]``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from picobot.config.sections import Section

_DAY = 86_400


class LearningSettings(Section):
    """Facts the bot learns by itself from conversations (see docs/learning.md)."""

    enabled: bool = True
    """Learn facts from conversations (background extraction, reply markers, /reflect) and
    put them in prompts. Off: nothing is learned, stored facts stay but are not used."""
    markers: Literal["auto", "on", "off"] = "auto"
    """Tell the model it may add [MEMORY:category:subject] lines to replies: "auto" does
    for every provider but the bundled local model, too small to follow it reliably.
    Marker lines are always removed from replies while learning is on."""
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
