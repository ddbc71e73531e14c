"""Token estimates behind one small interface.

The default is ceil(chars / 4), a fair average for English with BPE tokenizers. A
provider with a real tokenizer (the local model) replaces it via
:class:`ProviderTokenEstimator`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol

from picobot.llm.base import ChatMessage, LLMProvider

# Role markers and separators that chat templates add around each message.
MESSAGE_OVERHEAD_TOKENS = 4

TRUNCATED = " [... truncated]"
"""The visible marker at the end of a text cut to fit (:func:`truncate_to_tokens`)."""


class TokenEstimator(Protocol):
    """Estimates how many tokens a text costs."""

    def estimate(self, text: str) -> int:
        """Token count of ``text`` (an estimate; never negative)."""
        ...


class CharTokenEstimator:
    """ceil(len(text) / chars_per_token)."""

    def __init__(self, chars_per_token: int = 4) -> None:
        self._cpt = chars_per_token

    def estimate(self, text: str) -> int:
        """Characters divided by the ratio, rounded up."""
        return math.ceil(len(text) / self._cpt)


class ProviderTokenEstimator:
    """The provider's tokenizer when it has one, else the character estimate."""

    def __init__(self, provider: LLMProvider, fallback: TokenEstimator | None = None) -> None:
        self._provider = provider
        self._fallback = fallback or CharTokenEstimator()

    def estimate(self, text: str) -> int:
        """Exact count from the model when available."""
        exact = self._provider.count_tokens(text)
        return exact if exact is not None else self._fallback.estimate(text)


def message_cost(estimator: TokenEstimator, text: str) -> int:
    """Tokens a message costs in a prompt, framing included."""
    return estimator.estimate(text) + MESSAGE_OVERHEAD_TOKENS


def prompt_cost(estimator: TokenEstimator, messages: Iterable[ChatMessage]) -> int:
    """Tokens a prompt costs: every message with its framing, tool calls' names and
    arguments included."""
    return sum(
        message_cost(estimator, m.content)
        + sum(estimator.estimate(c.name + c.arguments) for c in m.tool_calls)
        for m in messages
    )


def truncate_to_tokens(estimator: TokenEstimator, text: str, max_tokens: int) -> str:
    """Cut ``text`` so it fits ``max_tokens``, with a visible marker when cut."""
    if estimator.estimate(text) <= max_tokens:
        return text
    marker = TRUNCATED
    room = max(0, max_tokens - estimator.estimate(marker))
    # Binary search on the prefix length: tokenizers are not linear in characters.
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimator.estimate(text[:mid]) <= room:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + marker
