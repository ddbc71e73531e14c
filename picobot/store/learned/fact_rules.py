"""The rules of learned facts: what a valid observation is and how confidence moves.

Pure functions and one frozen dataclass of numbers, so the store, the extraction task,
the reply markers and the CLI apply exactly the same rules. Defaults: a new fact
starts at 0.7; re-observing it adds 0.1 (at most 1.0); a newer
contradicting fact takes 0.3 off the old one; after 30 days untouched a fact loses 0.1
a week; a fact below 0.3 is inactive (kept, but never in a prompt); pinned facts never
decay.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass

from picobot.config.learning import LearningSettings

CATEGORIES = ("preference", "personal", "plan", "relationship", "event", "knowledge")
"""The categories a fact may have; anything else is dropped."""

MAX_FACT_WORDS = 40
"""Longest fact text, in words (a longer one is cut to this many)."""
MAX_SUBJECT_CHARS = 80
"""Longest subject (what or whom a fact is about)."""
REASONS = ("extracted", "reinforced", "contradicted", "decayed", "operator", "pinned", "unpinned")
"""Why a fact changed, as recorded in its history."""
DAY_SECS = 86_400.0


@dataclass(frozen=True, slots=True)
class LifecycleRules:
    """The numbers of the fact lifecycle (see the module docstring)."""

    initial_confidence: float = 0.7
    reinforce_step: float = 0.1
    contradict_step: float = 0.3
    min_confidence: float = 0.3
    """Below this a fact is inactive."""
    decay_step: float = 0.1
    decay_after_days: float = 30.0
    decay_every_days: float = 7.0


def lifecycle_rules(settings: LearningSettings) -> LifecycleRules:
    """The lifecycle numbers as configured."""
    return LifecycleRules(
        initial_confidence=settings.initial_confidence,
        reinforce_step=settings.reinforce_step,
        contradict_step=settings.contradict_step,
        min_confidence=settings.min_confidence,
        decay_step=settings.decay_step,
        decay_after_days=settings.decay_after_days,
        decay_every_days=settings.decay_every_days,
    )


@dataclass(frozen=True, slots=True)
class Observation:
    """One fact as observed (extracted or from a reply marker), already validated."""

    subject: str | None
    category: str
    text: str
    replaces: bool = False
    """The observer says it supersedes what is known about the same subject and category."""


def clamp(value: float) -> float:
    """Confidence kept within 0..1 and rounded to 2 places (no 0.9999999 drift)."""
    return round(min(1.0, max(0.0, value)), 2)


def is_active(confidence: float, rules: LifecycleRules) -> bool:
    """Whether a fact of this confidence may enter a prompt."""
    return confidence + 1e-9 >= rules.min_confidence


def _clean(text: str) -> str:
    # Control and format characters (a zero-width joiner, a bidi override) carry no
    # meaning in a fact and could hide text from an operator's listing.
    kept = "".join(ch if unicodedata.category(ch)[0] != "C" else " " for ch in text if ch != "\x00")
    return " ".join(kept.split())


def normalize_subject(subject: object) -> str | None:
    """A subject as stored: trimmed, lowercase, at most 80 characters; None when general."""
    if subject is None:
        return None
    if not isinstance(subject, str):
        raise ValueError("subject must be a string or null")
    cleaned = _clean(subject).lower()[:MAX_SUBJECT_CHARS].strip()
    return cleaned or None


def normalize_text(text: object) -> str:
    """A fact's text as stored: one line, at most 40 words; ValueError when empty."""
    if not isinstance(text, str):
        raise ValueError("text must be a string")
    words = _clean(text).split(" ")
    cleaned = " ".join(words[:MAX_FACT_WORDS]).strip()
    if not cleaned:
        raise ValueError("a fact needs some text")
    return cleaned


def validate_category(category: object) -> str:
    """The category in lowercase, or ValueError naming the allowed ones."""
    if not isinstance(category, str) or category.strip().lower() not in CATEGORIES:
        raise ValueError(f"category must be one of {', '.join(CATEGORIES)}")
    return category.strip().lower()


def observation(
    subject: object, category: object, text: object, replaces: object = False
) -> Observation:
    """A validated :class:`Observation`, or ValueError saying what is wrong."""
    return Observation(
        subject=normalize_subject(subject),
        category=validate_category(category),
        text=normalize_text(text),
        replaces=replaces is True,
    )


_PUNCT = re.compile(r"[^\w\s]")


def same_text(a: str, b: str) -> bool:
    """Whether two fact texts say the same (case, punctuation and spacing ignored)."""

    def key(s: str) -> str:
        return " ".join(_PUNCT.sub(" ", s.casefold()).split())

    return key(a) == key(b)


def decay_steps_due(updated_at: float, now: float, rules: LifecycleRules) -> int:
    """How many decay steps a fact untouched since ``updated_at`` has earned by ``now``.

    None in the first ``decay_after_days``; then one per full ``decay_every_days``.
    """
    idle = now - updated_at - rules.decay_after_days * DAY_SECS
    if idle < 0:
        return 0
    return math.floor(idle / (rules.decay_every_days * DAY_SECS))


_NAME_OR_NUMBER = re.compile(r"\d+(?:[.,]\d+)*|[^\W\d_][\w'-]*", re.UNICODE)


def _names_and_numbers(text: str) -> set[str]:
    """The numbers and capitalized words of ``text`` past its first word."""
    words = _NAME_OR_NUMBER.findall(text)
    return {w.casefold() for w in words[1:] if w[0].isdigit() or w[0].isupper()}


def is_paraphrase(a: str, b: str, similarity: float, threshold: float) -> bool:
    """Whether two fact texts of a category say the same in other words.

    ``similarity`` is their embeddings' cosine. A sentence model scores "has a dog
    named Rex" and "has a cat named Rex" as close as two wordings of one fact, so the
    threshold is high (0.9 by default: "User prefers green tea" and "The user likes
    green tea" score 0.93) and the names and numbers must agree too ("in May" is not
    "in June"): merging two facts loses one, keeping a near-duplicate loses nothing.
    """
    return similarity >= threshold and _names_and_numbers(a) == _names_and_numbers(b)
