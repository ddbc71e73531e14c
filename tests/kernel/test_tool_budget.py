"""Tool rounds stay within the prompt budget: outputs cut, prompt rebuilt, tools withdrawn."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from picobot.access.context import ToolContext
from picobot.config.settings import Settings
from picobot.kernel.prompt.tool_budget import MAX_CALLS_PER_ROUND, MIN_OUTPUT_TOKENS, ToolBudget
from picobot.llm.base import ToolCall, ToolSpec
from picobot.llm.scripted import ScriptedProvider, ScriptedTurn
from picobot.messages import OutboundKind
from picobot.runtime import open_runtime
from picobot.store.db import Database
from picobot.text.tokens import CharTokenEstimator, prompt_cost
from tests.kernel.conftest import ALICE, KernelFactory, run

EST = CharTokenEstimator()


class BigTool:
    """Returns ``size`` characters, marked at both ends."""

    def __init__(self, size: int) -> None:
        self.size = size

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec("big", "Return a lot of text", {"type": "object"})

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        return "HEAD" + "x" * self.size + "TAIL"


def big_call(cid: str = "c1") -> ScriptedTurn:
    return ScriptedTurn(tool_calls=(ToolCall(cid, "big", "{}"),))


async def test_a_huge_tool_output_is_cut_and_the_prompt_rebuilt_within_budget(
    make_kernel: KernelFactory, db: Database
) -> None:
    budget = 1000
    provider = ScriptedProvider()
    kernel = make_kernel(provider, tools=[BigTool(50_000)], budget=budget)
    for i in range(6):  # history that fills the budget
        await run(kernel, ALICE, f"old message {i} " + "h" * 600)
    provider.add(big_call(), "answered")
    events = await run(kernel, ALICE, "use the big tool")
    assert events[-1].kind == OutboundKind.DONE and events[-1].text == "answered"
    first, second = provider.prompts[-2:]
    assert prompt_cost(EST, first) <= budget and prompt_cost(EST, second) <= budget
    output = second[-1]
    assert output.role == "tool" and "HEAD" in output.content
    assert "TAIL" not in output.content and "[... truncated]" in output.content
    # The rebuilt prompt made room by dropping older history, never the current message.
    assert second[-3].content == "use the big tool"
    assert len(second) - 2 < len(first)
    # The first round took the tool share: the next call offers no tools.
    assert provider.tools_seen[-2] and provider.tools_seen[-1] == []
    # The record keeps the whole output.
    kept = await db.fetchone("SELECT picobot_open(result) AS result FROM tool_records")
    assert kept is not None and str(kept["result"]).endswith("TAIL")


async def test_small_outputs_leave_the_prompt_and_tools_alone(make_kernel: KernelFactory) -> None:
    provider = ScriptedProvider([big_call("c1"), big_call("c2"), "done"])
    kernel = make_kernel(provider, tools=[BigTool(100)], budget=4000)
    await run(kernel, ALICE, "go")
    assert [len(t) for t in provider.tools_seen] == [1, 1, 1]
    assert all("TAIL" in m.content for m in provider.prompts[-1] if m.role == "tool")
    # No rebuild was needed: the prompt before the exchange is the same each time.
    assert provider.prompts[0] == provider.prompts[2][: len(provider.prompts[0])]


async def test_a_round_of_hundreds_of_calls_runs_a_bounded_few_within_budget(
    make_kernel: KernelFactory, db: Database
) -> None:
    # A small model stuck in a loop can emit one tool call after another in one answer.
    calls = tuple(ToolCall(f"c{i}", "big", "{}") for i in range(300))
    provider = ScriptedProvider([ScriptedTurn(tool_calls=calls), "done"])
    kernel = make_kernel(provider, tools=[BigTool(100)], budget=4000)
    events = await run(kernel, ALICE, "go")
    assert events[-1].kind == OutboundKind.DONE and events[-1].text == "done"
    assert [prompt_cost(EST, p) <= 4000 for p in provider.prompts] == [True, True]
    # The transcript holds the calls that ran, each with its result, and no others.
    second = provider.prompts[1]
    (asked,) = [m for m in second if m.tool_calls]
    assert [c.id for c in asked.tool_calls] == [f"c{i}" for i in range(MAX_CALLS_PER_ROUND)]
    answered = [m.tool_call_id for m in second if m.role == "tool"]
    assert answered == [c.id for c in asked.tool_calls]
    with sqlite3.connect(db.path) as conn:
        (ran,) = conn.execute("SELECT COUNT(*) FROM tool_records").fetchone()
    assert ran == MAX_CALLS_PER_ROUND


async def test_parallel_calls_run_only_while_their_results_fit_the_share(
    make_kernel: KernelFactory, db: Database
) -> None:
    # Even a result cut to nothing costs its framing: four of them overran 256 tokens.
    calls = tuple(ToolCall(f"c{i}", "big", "{}") for i in range(4))
    provider = ScriptedProvider([ScriptedTurn(tool_calls=calls), "done"])
    kernel = make_kernel(provider, tools=[BigTool(1000)], budget=256)
    await run(kernel, ALICE, "go " + "q" * 400)
    assert [prompt_cost(EST, p) <= 256 for p in provider.prompts] == [True, True]
    second = provider.prompts[1]
    (asked,) = [m for m in second if m.tool_calls]
    assert 1 <= len(asked.tool_calls) < 4
    assert [m.tool_call_id for m in second if m.role == "tool"] == [c.id for c in asked.tool_calls]
    assert "HEAD" in second[-len(asked.tool_calls)].content  # the first output is not starved


def test_the_share_bounds_outputs_and_closes_at_the_minimum() -> None:
    budget = ToolBudget(EST, 800)
    budget.call("", (ToolCall("a", "big", "{}"),))
    budget.result(ToolCall("a", "big", "{}"), "y" * 10_000)
    assert budget.used <= 400 + 8  # the share, give or take the marker's rounding
    assert not budget.open
    unlimited = ToolBudget(EST, None)
    unlimited.result(ToolCall("a", "big", "{}"), "y" * 10_000)
    assert unlimited.open and "[... truncated]" not in unlimited.messages[0].content
    assert MIN_OUTPUT_TOKENS < 400


async def test_memory_and_search_rounds_stay_within_the_budget(tmp_path: Path) -> None:
    """The runtime's own retriever and tools: 50 long memories, a long history."""
    search = ToolCall("c1", "memory_search", json.dumps({"query": "zebra", "top_k": 20}))
    listing = ToolCall("c2", "memory", json.dumps({"action": "list"}))
    provider = ScriptedProvider()
    # A model with tools and no small-model profile: the whole 4000-token budget.
    settings = Settings(data={"dir": str(tmp_path / "data")}, llm={"provider": "scripted"})  # type: ignore[arg-type]
    async with open_runtime(settings, provider=provider) as rt:
        kernel = rt.kernel
        for i in range(50):
            await run(kernel, ALICE, f"/remember k{i}: zebra " + "the stripes of it " * 110)
        for _ in range(25):
            await run(kernel, ALICE, "zebra " + "we saw one at the zoo " * 90)
        provider.add(
            ScriptedTurn(tool_calls=(search,)), ScriptedTurn(tool_calls=(listing,)), "done"
        )
        events = await run(kernel, ALICE, "what do you remember?")
        assert events[-1].text == "done"
        budget = settings.session.memory.context_budget_tokens
        turn = provider.prompts[-3:]
        assert [prompt_cost(kernel.estimator, p) <= budget for p in turn] == [True] * 3
        # Before the fix the third call held both outputs whole: 3.2 times the budget.
        tools = [m for m in turn[-1] if m.role == "tool"]
        assert len(tools) == 2 and "[... truncated]" in tools[1].content
        assert provider.tools_seen[-1] == []  # the listing spent the share
