"""A scripted model that can be held mid-turn, shared by the channel tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence

from picobot.llm.base import ChatMessage, StreamEvent, ToolSpec
from picobot.llm.scripted import ScriptedProvider, ScriptedTurn


class GatedProvider(ScriptedProvider):
    """The scripted model, held before its first token until ``gate`` is set.

    ``entered`` is set once a turn waits at the gate: the kernel has stored the user's
    message by then, so cancelling the turn there interrupts no database write. With
    ``only``, just the turns whose message contains that text are held.
    """

    def __init__(
        self, turns: Iterable[ScriptedTurn | str] = (), *, only: str | None = None
    ) -> None:
        super().__init__(turns)
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        self._only = only

    async def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncIterator[StreamEvent]:
        if self._only is None or self._only in messages[-1].content:
            self.entered.set()
            await self.gate.wait()
        async for event in super().stream(messages, tools):
            yield event
