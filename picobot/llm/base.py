"""The provider protocol and the neutral message types every provider speaks.

A provider turns a list of :class:`ChatMessage` (plus optional tool specs) into a
stream of :class:`StreamEvent`: text deltas, then at most one batch of tool calls,
then a :class:`Finish`. Providers raise :class:`picobot.errors.LLMError` on failure.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Role = Literal["system", "user", "assistant", "tool"]

CONVERSATION: ContextVar[str | None] = ContextVar("picobot_conversation", default=None)
"""The conversation (session id) whose prompt the model is asked to continue, set by the
kernel before each chat turn's model call. A provider that keeps evaluated prompts (the
local one, :mod:`picobot.llm.prompt_states`) keeps one per conversation; a call made
outside a turn sees whatever the task last set, which only affects which state is kept."""


class ContextText(str):
    """The text of a prompt message that PicoBot wrote as context (memories, learned
    facts, the summary, recalled records), not words the user typed.

    Such messages travel as ``user`` messages, which every API accepts anywhere; a
    provider whose model cannot tell them from the user's own words may render them
    apart (the local one makes them system turns for the bundled model). A ``str``
    subclass, so user text can never carry the mark: only PicoBot's renderer sets it.
    """

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool invocation requested by the model; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a prompt, in the Chat Completions shape."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the model may call: name, description, JSON-schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the reply text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """The model asks for these tools to be run before it answers."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class Finish:
    """The end of a response; ``reason`` as the provider reported it."""

    reason: str = "stop"


StreamEvent = TextDelta | ToolCalls | Finish


@dataclass(frozen=True, slots=True)
class Completion:
    """A whole (non-streamed) response."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"


@runtime_checkable
class LLMProvider(Protocol):
    """What the kernel needs of a language model."""

    @property
    def model_name(self) -> str:
        """Human-readable model name for status lines and logs."""
        ...

    def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncIterator[StreamEvent]:
        """Stream one response. Raises LLMError when the model cannot answer."""
        ...

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> Completion:
        """Produce one whole response. Raises LLMError when the model cannot answer."""
        ...

    def count_tokens(self, text: str) -> int | None:
        """Exact token count with the model's tokenizer, or None when it has none."""
        ...

    async def aclose(self) -> None:
        """Release connections, threads and model memory."""
        ...


async def collect(events: AsyncIterator[StreamEvent]) -> Completion:
    """Drain a stream into a Completion; shared by providers that only stream."""
    parts: list[str] = []
    calls: tuple[ToolCall, ...] = ()
    reason = "stop"
    async for event in events:
        if isinstance(event, TextDelta):
            parts.append(event.text)
        elif isinstance(event, ToolCalls):
            calls = calls + event.calls
        else:
            reason = event.reason
    return Completion("".join(parts), calls, reason)
