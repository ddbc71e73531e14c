"""A deterministic provider for tests and demos.

Given a script it plays the turns in order (text replies, tool calls, failures);
without one it echoes the last user message, which makes end-to-end runs of
``picobot serve`` predictable without any model.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass

from picobot.errors import LLMError
from picobot.llm.base import (
    ChatMessage,
    Completion,
    Finish,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCalls,
    ToolSpec,
    collect,
)


@dataclass(frozen=True, slots=True)
class ScriptedTurn:
    """One scripted response: text, tool calls, or a failure."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    fail: bool = False


class ScriptedProvider:
    """Plays scripted turns in order, then echoes; records every prompt it saw."""

    def __init__(
        self,
        turns: Iterable[ScriptedTurn | str] = (),
        *,
        chunk_size: int = 4,
        delay_secs: float = 0.0,
    ) -> None:
        self._turns: deque[ScriptedTurn] = deque(
            t if isinstance(t, ScriptedTurn) else ScriptedTurn(text=t) for t in turns
        )
        self._chunk = max(1, chunk_size)
        self._delay = delay_secs
        self.prompts: list[list[ChatMessage]] = []
        self.tools_seen: list[list[ToolSpec]] = []

    @property
    def model_name(self) -> str:
        """Always ``scripted``."""
        return "scripted"

    def add(self, *turns: ScriptedTurn | str) -> None:
        """Queue more turns."""
        for t in turns:
            self._turns.append(t if isinstance(t, ScriptedTurn) else ScriptedTurn(text=t))

    async def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncIterator[StreamEvent]:
        """Yield the next scripted turn in small chunks."""
        self.prompts.append(list(messages))
        self.tools_seen.append(list(tools))
        turn = self._turns.popleft() if self._turns else self._echo(messages)
        if turn.fail:
            raise LLMError("scripted failure")
        for i in range(0, len(turn.text), self._chunk):
            if self._delay:
                await asyncio.sleep(self._delay)
            yield TextDelta(turn.text[i : i + self._chunk])
        if turn.tool_calls:
            yield ToolCalls(turn.tool_calls)
            yield Finish("tool_calls")
        else:
            yield Finish("stop")

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> Completion:
        """Collect the stream."""
        return await collect(self.stream(messages, tools))

    def count_tokens(self, text: str) -> int | None:
        """No tokenizer: the kernel's estimate applies."""
        return None

    async def aclose(self) -> None:
        """Nothing to release."""

    @staticmethod
    def _echo(messages: Sequence[ChatMessage]) -> ScriptedTurn:
        last = next((m.content for m in reversed(messages) if m.role == "user"), "")
        return ScriptedTurn(text=f"You said: {last}")
