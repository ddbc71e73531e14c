"""The learning task: idle sessions, chunks, redaction, failures, decay, after summaries."""

from __future__ import annotations

import json

from picobot.config.learning import LearningSettings
from picobot.llm.base import ChatMessage, Completion
from picobot.llm.scripted import ScriptedProvider, ScriptedTurn
from picobot.memory.extraction import ANSWER_SCHEMA
from picobot.privacy.redaction import Redactor
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.learned.facts import FactFilter, find_facts
from picobot.tasks.learning import LearningTask
from picobot.text.tokens import CharTokenEstimator

T0 = 1_700_000_000.0
KEY = "AKIA" + "IOSFODNN7EXAMPLE"


def answer(*texts: str) -> str:
    return json.dumps([{"subject": None, "category": "personal", "text": t} for t in texts])


async def chat(db: Database, user: str, lines: list[str], at: float = T0) -> str:
    sid = await SessionRepo(db).current_or_create("tui", user, user)
    for i, line in enumerate(lines):
        role = "user" if i % 2 == 0 else "assistant"
        await MessageRepo(db).append(sid, role, line, len(line) // 4, created_at=at)
    await db.execute_write("UPDATE sessions SET last_active = ? WHERE id = ?", (at, sid))
    return sid


def task(db: Database, provider: ScriptedProvider, now: list[float], **kw: object) -> LearningTask:
    settings = LearningSettings(**kw)  # type: ignore[arg-type]
    db.redact = Redactor().redact  # as the runtime does: the store's redactor is used
    return LearningTask(
        db,
        provider,
        CharTokenEstimator(),
        settings,
        clock=lambda: now[0],
    )


async def facts(db: Database) -> list[str]:
    return sorted(f.text for f in await db.read(lambda c: find_facts(c, FactFilter(), None)))


async def test_only_sessions_idle_long_enough_are_read_and_only_once(db: Database) -> None:
    now = [T0 + 100]
    await chat(db, "tui:alice", ["I live in Oslo", "nice"], at=T0)
    await chat(db, "tui:bob", ["I live in Rome", "ok"], at=T0 + 90)
    provider = ScriptedProvider([answer("lives in Oslo")])
    learning = task(db, provider, now, idle_secs=60)
    assert await learning.check_idle() == "1 facts learned from 1 idle sessions"
    assert len(provider.prompts) == 1 and "Oslo" in provider.prompts[0][1].content
    assert await facts(db) == ["lives in Oslo"]
    now[0] = T0 + 100 + 60
    provider2 = ScriptedProvider([answer("lives in Rome")])
    learning = task(db, provider2, now, idle_secs=60)
    await learning.check_idle()
    assert len(provider2.prompts) == 1 and "Rome" in provider2.prompts[0][1].content


async def test_long_sessions_are_read_in_chunks_of_bounded_input(db: Database) -> None:
    now = [T0 + 10_000]
    await chat(db, "tui:alice", [f"message {i} " + "x" * 1000 for i in range(20)])
    provider = ScriptedProvider([answer(f"fact {i}") for i in range(20)])
    learning = LearningTask(
        db, provider, CharTokenEstimator(), LearningSettings(), clock=lambda: now[0]
    )
    done = await learning.extract_session((await SessionRepo(db).list_sessions("tui:alice"))[0].id)
    assert done.messages == 20 and done.calls == len(provider.prompts) > 1
    for prompt in provider.prompts:
        assert CharTokenEstimator().estimate(prompt[1].content) <= 2000 + 40


async def test_secrets_are_redacted_before_the_model_sees_them_and_before_storing(
    db: Database,
) -> None:
    now = [T0 + 10_000]
    # Stored unredacted on purpose (another client could have written it).
    await chat(db, "tui:alice", [f"my key is {KEY}", "ok"])
    provider = ScriptedProvider([answer(f"has the AWS key {KEY}")])
    await task(db, provider, now).check_idle()
    assert KEY not in provider.prompts[0][1].content
    [text] = await facts(db)
    assert KEY not in text and "[REDACTED" in text


async def test_a_failed_call_keeps_the_messages_for_later(db: Database) -> None:
    now = [T0 + 10_000]
    sid = await chat(db, "tui:alice", ["I live in Oslo", "nice"])
    provider = ScriptedProvider([ScriptedTurn(fail=True), answer("lives in Oslo")])
    learning = task(db, provider, now)
    assert (await learning.extract_session(sid)).created == 0
    assert await learning.store.progress(sid) == 0
    await learning.check_idle()  # held back after the failure
    assert len(provider.prompts) == 1
    now[0] += 3600
    await learning.check_idle()
    assert await facts(db) == ["lives in Oslo"]


async def test_junk_answers_store_nothing_but_the_messages_count_as_read(db: Database) -> None:
    now = [T0 + 10_000]
    sid = await chat(db, "tui:alice", ["hello", "hi"])
    provider = ScriptedProvider(["I'm sorry, I can't do that."])
    learning = task(db, provider, now)
    await learning.check_idle()
    assert await facts(db) == [] and await learning.store.progress(sid) == 2


async def test_disabled_learning_calls_no_model(db: Database) -> None:
    now = [T0 + 10_000]
    await chat(db, "tui:alice", ["I live in Oslo", "nice"])
    provider = ScriptedProvider([answer("x")])
    learning = task(db, provider, now, enabled=False)
    assert await learning.check_idle() == "disabled"
    assert await learning.decay() == "disabled"
    assert provider.prompts == []


async def test_decay_job_uses_the_configured_numbers(db: Database) -> None:
    now = [T0]
    await chat(db, "tui:alice", ["I live in Oslo", "nice"], at=T0 - 1000)
    learning = task(
        db,
        ScriptedProvider([answer("lives in Oslo")]),
        now,
        decay_after_days=1,
        decay_every_days=1,
        decay_step=0.5,
    )
    await learning.check_idle()
    now[0] = T0 + 2 * 86_400
    assert await learning.decay() == "1 facts decayed"
    [fact] = await db.read(lambda c: find_facts(c, FactFilter(), None))
    assert fact.confidence == 0.2 and not fact.active


class GrammarProvider(ScriptedProvider):
    """A provider that can hold its answer to a JSON Schema, as the local one can."""

    def __init__(self, turns: list[str]) -> None:
        super().__init__(turns)
        self.schemas: list[object] = []

    async def complete_json(self, messages: list[ChatMessage], schema: object) -> Completion:
        self.schemas.append(schema)
        return await self.complete(messages)


async def test_extraction_asks_a_provider_that_can_for_json_held_to_the_schema(
    db: Database,
) -> None:
    now = [T0 + 10_000]
    await chat(db, "tui:alice", ["I live in Oslo", "nice"])
    provider = GrammarProvider([answer("lives in Oslo")])
    await task(db, provider, now).check_idle()
    assert provider.schemas == [ANSWER_SCHEMA]
    assert await facts(db) == ["lives in Oslo"]
