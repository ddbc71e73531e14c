"""Kernel fixtures: a real SQLite file and the scripted model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from picobot.kernel.kernel import Kernel
from picobot.kernel.prompt import WindowRetriever
from picobot.llm.base import LLMProvider
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, Outbound, OutboundKind
from picobot.store.conversation.messages import MessageRepo
from picobot.store.db import Database
from picobot.text.tokens import CharTokenEstimator
from picobot.tools.base import Tool, ToolRegistry

ALICE = Identity("tui", "tui:alice", "local")
BOB = Identity("tui", "tui:bob", "local")


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated database file under tmp_path (short busy timeout for lock tests)."""
    database = await Database.open(tmp_path / "data" / "conversations.db", busy_timeout_ms=200)
    yield database
    await database.close()


KernelFactory = Callable[..., Kernel]


@pytest.fixture
def make_kernel(db: Database) -> KernelFactory:
    """Build a kernel on the test database with a chosen provider and tools."""

    def make(
        provider: LLMProvider | None = None,
        *,
        tools: list[Tool] | None = None,
        budget: int = 4000,
        window: int = 20,
        max_tool_rounds: int = 4,
    ) -> Kernel:
        estimator = CharTokenEstimator()
        return Kernel(
            db=db,
            provider=provider or ScriptedProvider(),
            retriever=WindowRetriever(
                MessageRepo(db), estimator, budget_tokens=budget, max_messages=window
            ),
            estimator=estimator,
            tools=ToolRegistry(tools or []),
            system_prompt="You are a test bot.",
            max_tool_rounds=max_tool_rounds,
            budget_tokens=budget,
        )

    return make


async def run(kernel: Kernel, who: Identity, text: str, **kw: str) -> list[Outbound]:
    """All events of one message."""
    return [e async for e in kernel.handle(Inbound(who, text, **kw))]


def kinds(events: list[Outbound]) -> list[OutboundKind]:
    """Event kinds without the repeated tokens."""
    out: list[OutboundKind] = []
    for e in events:
        if e.kind == OutboundKind.TOKEN and out and out[-1] == OutboundKind.TOKEN:
            continue
        out.append(e.kind)
    return out
