"""What a model writes is redacted before it is stored, wherever it is stored.

A scripted model writes secrets into a reply, a tool call and a session summary (and a
learned fact is stored with one); the
raw bytes of the database files must not hold them. The store redacts in its write
path (``Database.redact``), so a repository added later gets it by construction.
"""

from __future__ import annotations

import json
from pathlib import Path

from picobot.config.settings import DataSettings, MemorySettings, Settings
from picobot.llm.base import ToolCall
from picobot.llm.scripted import ScriptedProvider, ScriptedTurn
from picobot.messages import Identity, Inbound
from picobot.runtime import open_database, open_runtime
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.conversation.summaries import SummaryRepo
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore
from picobot.tasks.summarize import Summarizer
from picobot.tasks.supervisor import TaskSupervisor
from picobot.text.tokens import CharTokenEstimator
from tests.privacy.test_erasure import scan

AWS_KEY = "AKIAZ7QX3M4PLK2JWV9R"
PASSWORD = "Tr0ub4dor-horse-zq81x"
ME = Identity("tui", "tui:local", "local")


def settings(tmp_path: Path) -> Settings:
    return Settings(data=DataSettings(dir=str(tmp_path / "data")))


async def files_hold(tmp_path: Path, *secrets: str) -> dict[str, list[str]]:
    return scan(tmp_path / "data", secrets)


async def test_a_summary_the_model_writes_is_stored_redacted(tmp_path: Path) -> None:
    written = f"The user shared password: {PASSWORD} and the key {AWS_KEY}."
    provider = ScriptedProvider([written])
    memory = MemorySettings(summarization_trigger_tokens=200, summarization_keep_recent=2)
    async with open_database(settings(tmp_path)) as db, TaskSupervisor() as sup:
        sid = await SessionRepo(db).create(ME.channel, ME.chat_id, ME.user_id)
        for i in range(12):
            text = f"message {i} " + "words " * 20
            await MessageRepo(db).append(sid, "user" if i % 2 == 0 else "assistant", text, 30)
        summarizer = Summarizer(db, provider, CharTokenEstimator(), memory, supervisor=sup)
        assert await summarizer.summarize_session(sid)
        stored = await SummaryRepo(db).get(sid)
        assert stored is not None
        assert "[REDACTED:" in stored.summary and PASSWORD not in stored.summary
        await db.checkpoint()
    assert await files_hold(tmp_path, PASSWORD, AWS_KEY) == {}


async def test_a_reply_and_a_tool_call_the_model_writes_are_stored_redacted(
    tmp_path: Path,
) -> None:
    arguments = json.dumps({"action": "save", "key": "note", "content": f"password: {PASSWORD}"})
    provider = ScriptedProvider(
        [
            ScriptedTurn(tool_calls=(ToolCall("c1", "memory", arguments),)),
            ScriptedTurn(text=f"Saved. Your key is {AWS_KEY}, password: {PASSWORD}"),
        ]
    )
    async with open_runtime(settings(tmp_path), provider=provider) as rt:
        events = [e async for e in rt.kernel.handle(Inbound(ME, "remember my login"))]
        assert events[-1].kind == "done"
        replies = await rt.db.fetchall(
            "SELECT picobot_open(content) FROM messages WHERE role = 'assistant'"
        )
        assert [r[0].count("[REDACTED:") for r in replies] == [2]
        await rt.db.checkpoint()
    assert await files_hold(tmp_path, PASSWORD, AWS_KEY) == {}


async def test_the_store_redacts_what_a_repository_writes_whoever_calls_it(
    tmp_path: Path,
) -> None:
    # No kernel in between: a feature that writes model output through the store is
    # covered without redacting on its own.
    async with open_database(settings(tmp_path)) as db:
        sid = await SessionRepo(db).create(ME.channel, ME.chat_id, ME.user_id)
        msg = await MessageRepo(db).append(sid, "assistant", f"key {AWS_KEY}", 5)
        assert AWS_KEY not in msg.content
        assert await SummaryRepo(db).save(sid, f"password: {PASSWORD}", msg.seq_order, 5, 0.0)
        learned = Observation("login", "fact", f"uses the key {AWS_KEY}")
        await FactStore(db).observe(ME.user_id, [learned], session_id=sid, message_id=None, now=1.0)
        await db.checkpoint()
    assert await files_hold(tmp_path, PASSWORD, AWS_KEY) == {}
