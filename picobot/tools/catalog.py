"""The tools a kernel can offer, by name: adding one is its module plus one line here.

A factory gets :class:`ToolDeps` (the settings and the shared services, built once by
the runtime) and returns its tool, or None when the settings switch it off. The
runtime builds every registered tool, in registration order (the order the model
sees them in).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from picobot.config.settings import Settings
from picobot.recall.meaning import VectorRecall
from picobot.registry import Registry
from picobot.store.retrieval.search import SearchIndex
from picobot.tools.base import Tool, ToolRegistry
from picobot.tools.memory import MemoryTool, Notes
from picobot.tools.memory_search import MemorySearchTool


@dataclass(frozen=True, slots=True)
class ToolDeps:
    """What tool factories may use; ``memory`` is None when user memories are off;
    ``terms`` turns a query into search terms."""

    settings: Settings
    index: SearchIndex
    memory: Notes | None
    terms: Callable[[str], list[str]]
    meaning: VectorRecall | None = None
    """Recall by meaning, when an embedding model is configured."""


ToolFactory = Callable[[ToolDeps], Tool | None]
"""Builds one tool, or None when the settings leave it out."""

TOOLS: Registry[ToolFactory] = Registry("tool")


@TOOLS.register("memory_search")
def _memory_search(deps: ToolDeps) -> Tool:
    return MemorySearchTool(deps.index, terms=deps.terms, meaning=deps.meaning)


@TOOLS.register("memory")
def _memory(deps: ToolDeps) -> Tool | None:
    return None if deps.memory is None else MemoryTool(deps.memory)


def build_tools(deps: ToolDeps, names: list[str] | None = None) -> ToolRegistry:
    """The tools ``names`` (default: every registered one) that ``deps`` switch on.

    An unknown name is a ConfigError listing the known ones.
    """
    tools = ToolRegistry()
    for name in TOOLS.names() if names is None else names:
        tool = TOOLS.get(name)(deps)
        if tool is not None:
            tools.register(tool)
    return tools
