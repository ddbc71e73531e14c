"""A zero-latency model: the bench measures PicoBot, not a language model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from picobot.llm.base import ChatMessage, Completion, Finish, StreamEvent, TextDelta, ToolSpec


class InstantProvider:
    """Answers at once with the next of ``replies`` (one text delta), never waits.

    Unlike ``ScriptedProvider`` it keeps no record of the prompts it saw, so memory stays
    flat over tens of thousands of turns.
    """

    def __init__(self, replies: Sequence[str]) -> None:
        self._replies = list(replies) or ["ok."]
        self._next = 0

    @property
    def model_name(self) -> str:
        """The name shown in the WebSocket hello."""
        return "bench-instant"

    def _reply(self) -> str:
        text = self._replies[self._next % len(self._replies)]
        self._next += 1
        return text

    async def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncIterator[StreamEvent]:
        """One delta with the whole reply, then the finish."""
        yield TextDelta(self._reply())
        yield Finish("stop")

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> Completion:
        """The next reply, whole (the summarizer's calls land here)."""
        return Completion(self._reply())

    def count_tokens(self, text: str) -> int | None:
        """No tokenizer: PicoBot's estimate applies."""
        return None

    async def aclose(self) -> None:
        """Nothing to release."""
