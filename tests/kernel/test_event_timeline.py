"""Acceptance: a session's timeline is rebuilt, in order, from its events and its messages
alone: the turns, the tool call the model made (and the memory it saved), the summary.

A real runtime over a real SQLite file; the model is scripted to call the memory tool,
and a summary is forced by a small trigger.
"""

from __future__ import annotations

from pathlib import Path

from picobot.config.learning import LearningSettings, MemoryRootSettings
from picobot.config.settings import DataSettings, MemorySettings, SessionSettings, Settings
from picobot.llm.base import ToolCall
from picobot.llm.scripted import ScriptedProvider, ScriptedTurn
from picobot.messages import Identity, Inbound
from picobot.runtime import Runtime, open_runtime
from picobot.store.conversation.events import Event, EventFilter, list_events

ALICE = Identity("tui", "tui:alice", "local")
SAVE = '{"action": "save", "key": "city", "content": "Lisbon"}'


async def say(rt: Runtime, text: str) -> str:
    events = [e async for e in rt.kernel.handle(Inbound(ALICE, text))]
    sids = {e.session_id for e in events if e.session_id}
    assert len(sids) == 1
    return sids.pop()


def timeline(events: list[Event], texts: dict[int, tuple[str, str]]) -> list[tuple[object, ...]]:
    """What happened, from the events; a message's role and text looked up by its id."""
    lines: list[tuple[object, ...]] = []
    for event in events:
        p = event.payload
        if event.type == "message.appended":
            lines.append(texts[p["message_id"]])
        elif event.type in ("tool.started", "tool.completed"):
            lines.append((event.type, p["name"], p.get("ok")))
        elif event.type == "summary.updated":
            lines.append((event.type, p["covered_seq"], event.actor))
        else:
            lines.append((event.type,))
    return lines


async def test_a_sessions_timeline_is_rebuilt_from_events_and_messages(tmp_path: Path) -> None:
    settings = Settings(
        data=DataSettings(dir=str(tmp_path)),
        # A reflection follows a summary in the background, racing the last turn; its
        # events are covered by tests/tasks/test_reflection.py.
        memory=MemoryRootSettings(learning=LearningSettings(reflections=False)),
        session=SessionSettings(
            memory=MemorySettings(
                # Summaries are asked for below, not left to the background check.
                enable_summarization=False,
                summarization_trigger_tokens=100,
                summarization_keep_recent=2,
            )
        ),
    )
    provider = ScriptedProvider(
        [
            ScriptedTurn("Let me note that.", (ToolCall("c1", "memory", SAVE),)),
            "Noted: Lisbon.",
        ]
    )
    async with open_runtime(settings, provider=provider) as rt:
        sid = await say(rt, "remember that my city is Lisbon " + "please " * 40)
        await say(rt, "and what is the weather like " + "today " * 40)
        provider.add("Alice lives in Lisbon and asked about the weather.")
        assert await rt.summarizer.summarize_session(sid)
        await say(rt, "thanks")

        messages = await rt.kernel.messages.last(sid, 100)
        events = await rt.db.read(lambda c: list_events(c, EventFilter(session_id=sid), 1000))

    # In time order: a tool call is recorded in one write as it ends, so its
    # tool.started (at = when it started) follows, by id, what the tool itself wrote.
    events.sort(key=lambda e: (e.at, e.id))
    texts = {m.id: (m.role, m.content) for m in messages}
    first, second, third = (m.content for m in messages if m.role == "user")
    assert timeline(events, texts) == [
        ("session.started",),
        ("user", first),
        ("tool.started", "memory", None),
        ("memory.saved",),
        ("tool.completed", "memory", True),
        ("assistant", "Let me note that.\n\nNoted: Lisbon."),
        ("user", second),
        ("assistant", f"You said: {second}"),
        ("summary.updated", 2, "supervisor"),
        ("user", third),
        ("assistant", "You said: thanks"),
    ]
    # The call cost one write: its start and end were recorded together.
    started = next(e for e in events if e.type == "tool.started")
    completed = next(e for e in events if e.type == "tool.completed")
    assert completed.id == started.id + 1 and started.at <= completed.at
    # Every message is accounted for, and no event carries what was said.
    assert sorted(e.payload["message_id"] for e in events if "message_id" in e.payload) == sorted(
        texts
    )
    assert all("Lisbon" not in str(e.payload) for e in events)
    assert {e.user_id for e in events} == {ALICE.user_id}
