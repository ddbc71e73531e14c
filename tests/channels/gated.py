"""A scripted model that can be held mid-turn, shared by the channel tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from picobot.llm.base import ChatMessage, StreamEvent, ToolSpec
from picobot.llm.scripted import ScriptedProvider


class GatedProvider(ScriptedProvider):
    """The scripted model, held before its first token until ``gate`` is set.

    ``entered`` is set once a turn waits at the gate: the kernel has stored the user's
    message by then, so cancelling the turn there interrupts no database write.
    """

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncIterator[StreamEvent]:
        self.entered.set()
        await self.gate.wait()
        async for event in super().stream(messages, tools):
            yield event
