"""The prompt-context seam: what the model sees each turn.

:class:`WindowRetriever` is the spine's retriever: the system prompt, the last
``max_session_messages`` messages that fit the token budget (oldest dropped first),
and the current user message, which is never dropped (only truncated, visibly, when it
alone exceeds the budget).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from picobot.access.context import ToolContext
from picobot.llm.base import ChatMessage, Role
from picobot.store.conversation.messages import MessageRepo, StoredMessage
from picobot.text.tokens import TokenEstimator, message_cost, truncate_to_tokens


@dataclass(frozen=True, slots=True)
class PromptRequest:
    """Everything a retriever needs to build one turn's prompt."""

    ctx: ToolContext
    session_id: str
    system_prompt: str
    current: StoredMessage
    reserve_tokens: int = 0
    """Tokens of the budget kept free for what the caller adds after the prompt (a tool
    round's call and output); the prompt fits the rest."""


class ContextRetriever(Protocol):
    """Builds the prompt for a turn."""

    async def build(self, request: PromptRequest) -> list[ChatMessage]:
        """Messages to send to the model, system prompt first, current message last."""
        ...


def as_chat(message: StoredMessage) -> ChatMessage:
    """A stored message as a prompt message."""
    role: Role = "assistant" if message.role == "assistant" else "user"
    return ChatMessage(role, message.content)


def fit_recent(
    history: Sequence[StoredMessage], estimator: TokenEstimator, budget: int
) -> list[StoredMessage]:
    """The newest suffix of ``history`` whose cost fits ``budget`` (oldest dropped first)."""
    kept: list[StoredMessage] = []
    used = 0
    for message in reversed(history):
        cost = message_cost(estimator, message.content)
        if used + cost > budget:
            break
        kept.append(message)
        used += cost
    kept.reverse()
    return kept


class WindowRetriever:
    """System prompt + last N messages within the token budget + current message."""

    def __init__(
        self,
        messages: MessageRepo,
        estimator: TokenEstimator,
        *,
        budget_tokens: int,
        max_messages: int,
    ) -> None:
        self._messages = messages
        self._estimator = estimator
        self._budget = budget_tokens
        self._max = max_messages

    async def build(self, request: PromptRequest) -> list[ChatMessage]:
        """Fit the window into the budget; the current message always goes last."""
        system = ChatMessage("system", request.system_prompt)
        remaining = (
            self._budget - request.reserve_tokens - message_cost(self._estimator, system.content)
        )
        current_text = request.current.content
        if message_cost(self._estimator, current_text) > remaining:
            current_text = truncate_to_tokens(
                self._estimator, current_text, max(0, remaining - message_cost(self._estimator, ""))
            )
        remaining -= message_cost(self._estimator, current_text)
        recent = await self._messages.last(request.session_id, self._max + 1)
        history = [m for m in recent if m.id != request.current.id][-self._max :]
        window = fit_recent(history, self._estimator, max(0, remaining))
        return [system, *(as_chat(m) for m in window), ChatMessage("user", current_text)]
