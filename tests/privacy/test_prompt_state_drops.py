"""Evaluated prompts a model keeps (the local provider's prompt states) hold user content:
every purge, in this process or another, and every retention run that deleted something
makes the runtime drop them (``forget_prompts``)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from picobot.config.settings import Settings
from picobot.llm.base import CONVERSATION, ChatMessage, StreamEvent, ToolSpec
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, Outbound, OutboundKind
from picobot.privacy.controller import PrivacyController
from picobot.privacy.scopes import Actor, SessionScope
from picobot.runtime import Runtime, open_runtime
from picobot.tasks.retention import RetentionTask

ALICE = Identity("tui", "tui:alice", "alice-chat")
OPERATOR = Actor("operator:cli", operator=True)
DAY = 86_400.0


class KeepingProvider(ScriptedProvider):
    """The scripted model with the hook of a provider that keeps evaluated prompts, and
    the conversation each prompt was asked in."""

    def __init__(self) -> None:
        super().__init__()
        self.forgotten = 0
        self.conversations: list[str | None] = []

    def forget_prompts(self) -> int:
        self.forgotten += 1
        return 0

    async def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncIterator[StreamEvent]:
        self.conversations.append(CONVERSATION.get())
        async for event in super().stream(messages, tools):
            yield event


@pytest.fixture
async def model() -> KeepingProvider:
    return KeepingProvider()


@pytest.fixture
async def rt(tmp_path: Path, model: KeepingProvider) -> AsyncIterator[Runtime]:
    settings = Settings(data={"dir": str(tmp_path / "data")})
    async with open_runtime(settings, provider=model) as runtime:
        yield runtime


async def say(rt: Runtime, text: str) -> list[Outbound]:
    return [e async for e in rt.kernel.handle(Inbound(ALICE, text))]


async def test_each_turn_names_its_session_as_the_conversation(
    rt: Runtime, model: KeepingProvider
) -> None:
    first = (await say(rt, "hello"))[0].session_id
    await say(rt, "/new")
    second = (await say(rt, "hello again"))[0].session_id
    assert first and second and first != second
    # (Between them, background work may have asked the model too: no turn's prompt.)
    assert model.conversations[0] == first
    assert model.conversations[-1] == second


async def test_undo_drops_kept_prompts_at_once(rt: Runtime, model: KeepingProvider) -> None:
    await say(rt, "my PIN is 4321")
    ask = await say(rt, "/undo")
    assert ask[-1].kind == OutboundKind.CONFIRM_REQUEST
    assert model.forgotten == 0  # asking deletes nothing
    token = ask[-1].token
    assert token
    done = [e async for e in rt.kernel.confirm(ALICE, token, "y")]
    assert done[-1].kind == OutboundKind.NOTICE
    assert model.forgotten == 1


async def test_a_purge_by_another_process_drops_them_within_a_check(
    rt: Runtime, model: KeepingProvider
) -> None:
    sid = (await say(rt, "hello"))[0].session_id
    assert sid
    job = rt.tasks.job("purge-watch")

    async def check() -> None:
        runs = job.status.runs
        job.wake()
        await job.wait_runs(runs + 1)

    await check()
    assert model.forgotten == 0  # no purge since the last look
    # Another process: its own controller, not hooked to this runtime's model.
    other = PrivacyController(rt.db)
    await other.execute(await other.plan(SessionScope(sid), OPERATOR))
    assert model.forgotten == 0
    await check()
    assert model.forgotten == 1
    await check()
    assert model.forgotten == 1


async def test_retention_drops_them_only_when_it_deleted_something(
    rt: Runtime, model: KeepingProvider
) -> None:
    await say(rt, "hello")
    later = time.time() + 10 * DAY
    retention = RetentionTask(rt.db, max_age_days=1, clock=lambda: later)
    retention.on_deleted.append(model.forget_prompts)
    assert (await retention.run()).counts.total > 0
    assert model.forgotten == 1
    assert (await retention.run()).counts.total == 0
    assert model.forgotten == 1
