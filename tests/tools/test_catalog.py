"""The tool registry: every registered tool the settings switch on reaches the model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from picobot.access.context import ToolContext
from picobot.config.settings import Settings
from picobot.errors import ConfigError
from picobot.llm.base import ToolSpec
from picobot.recall.keywords import extract_terms
from picobot.services.notes import NoteService
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.db import Database
from picobot.store.retrieval.search import SearchIndex
from picobot.tools.base import Tool
from picobot.tools.catalog import TOOLS, ToolDeps, build_tools


class ClockTool:
    """A stand-in tool that answers a fixed time."""

    spec = ToolSpec(name="clock", description="the time", parameters={"type": "object"})

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        return "noon"


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "t.db")
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
def clock_tool() -> Iterator[None]:
    def factory(deps: ToolDeps) -> Tool:
        return ClockTool()

    with TOOLS.added("clock", factory):
        yield


def _deps(db: Database, *, memories: bool) -> ToolDeps:
    service = NoteService(MemoryRepo(db), max_count=3, max_chars=40) if memories else None
    return ToolDeps(Settings(), SearchIndex(db), service, extract_terms)


async def test_the_memory_tool_follows_the_memory_service(db: Database) -> None:
    names = [spec.name for spec in build_tools(_deps(db, memories=True)).specs()]
    assert names == ["memory_search", "memory"]
    names = [spec.name for spec in build_tools(_deps(db, memories=False)).specs()]
    assert names == ["memory_search"]


async def test_a_registered_tool_is_usable(db: Database, clock_tool: None) -> None:
    tools = build_tools(_deps(db, memories=False))
    assert [spec.name for spec in tools.specs()] == ["memory_search", "clock"]
    ctx = ToolContext(user_id="tui:local", session_id=None, channel="tui")
    assert await tools.call(ctx, "clock", "{}") == (True, "noon")


async def test_an_unknown_tool_lists_the_known_ones(db: Database) -> None:
    with pytest.raises(ConfigError, match="unknown tool 'nope'; known: memory, memory_search"):
        build_tools(_deps(db, memories=False), ["nope"])
