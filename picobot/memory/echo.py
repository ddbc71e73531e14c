"""Invented memories: model output that echoes its instructions or claims an identity.

A model too small for the task answers a reflection or extraction prompt with its own
persona ("I'm Dana, a language model...") or with the words of the prompt it was given;
stored, such text would come back in later prompts as if it were something the user
said. No I/O here: :func:`invented` says why a text must not be stored, or None.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

ECHO_WORDS = 6
"""A run of this many words of the instructions, found in the answer, is an echo."""

_IDENTITY = re.compile(
    r"\b(?:i am|i'm|i\u2019m|my name is)\b[^.!?\n]{0,40}?\b"
    r"(?:(?:large )?language model|an ai\b|ai (?:assistant|model)|chat ?bot|"
    r"virtual assistant|(?:helpful|friendly) assistant|picobot|smollm2?)"
    r"|\bas an? (?:ai|language model)\b"
    r"|\byou are (?:picobot|an? (?:helpful|friendly) assistant)\b",
    re.IGNORECASE,
)
"""The model speaking about itself: "I'm Dana, a language model", "as an AI", "I am
PicoBot", "You are PicoBot, a friendly assistant" (its own system prompt)."""
_MARKUP = re.compile(r"</?(?:p|div|span|br|html|body|s|system|user|assistant|im_start)\b[^>]*>")
"""Chat-template or HTML tags: a small model copies them from its training data."""
_WORD = re.compile(r"[\w']+")


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _shingles(words: list[str], size: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + size]) for i in range(len(words) - size + 1)}


def invented(text: str, instructions: Iterable[str] = ()) -> str | None:
    """Why ``text`` must not be stored as a memory, or None when nothing says so.

    ``instructions``: the prompt texts the model was given (system prompt, request);
    :data:`ECHO_WORDS` consecutive words of one of them in ``text`` are an echo. The
    reason names no content, so it may be logged.
    """
    if _IDENTITY.search(text):
        return "it speaks as the model about itself"
    if _MARKUP.search(text):
        return "it holds chat-template or HTML markup"
    said = _shingles(_words(text), ECHO_WORDS)
    if said:
        for instruction in instructions:
            if said & _shingles(_words(instruction), ECHO_WORDS):
                return "it repeats the instructions it was given"
    return None
