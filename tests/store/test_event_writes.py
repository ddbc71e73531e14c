"""Every write that records an event records it with what it changed, content-free;
purges and retention take events with the data they describe."""

from __future__ import annotations

from typing import Any

import pytest

from picobot.privacy.controller import PrivacyController
from picobot.privacy.scopes import Actor, SessionScope
from picobot.store.conversation.events import Event, EventFilter, list_events
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.conversation.messages import MessageRepo, SessionGone
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.conversation.summaries import SummaryRepo
from picobot.store.conversation.tool_records import ToolRecordRepo
from picobot.store.db import Database
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.learned.facts import FactFilter
from picobot.tasks.retention import RetentionTask

ALICE = "tui:alice"
DAY = 86_400.0
T0 = 1_700_000_000.0


async def events(db: Database, **where: Any) -> list[Event]:
    return await db.read(lambda c: list_events(c, EventFilter(**where), 10_000))


def kinds(found: list[Event]) -> list[str]:
    return [e.type for e in found]


async def test_sessions_record_started_forked_and_a_real_resume(db: Database) -> None:
    repo = SessionRepo(db)
    first = await repo.current_or_create("tui", "local", ALICE)
    assert await repo.current_or_create("tui", "local", ALICE) == first  # no new event
    fork = await repo.create("tui", "local", ALICE, parent_session_id=first)
    await repo.set_current("tui", "local", ALICE, first)
    await repo.set_current("tui", "local", ALICE, first)  # already current: nothing
    found = await events(db, user_id=ALICE)
    assert [(e.type, e.session_id) for e in found] == [
        ("session.started", first),
        ("session.forked", fork),
        ("session.resumed", first),
    ]
    assert found[0].payload == {"channel": "tui"}
    assert found[1].payload == {"channel": "tui", "parent_session_id": first}
    assert all(e.actor is None for e in found)


async def test_messages_tools_and_summaries_record_ids_never_text(db: Database) -> None:
    sid = await SessionRepo(db).create("tui", "local", ALICE)
    messages = MessageRepo(db)
    hello = await messages.append(sid, "user", "secret hello", 3, created_at=T0)
    # The same message handed over again is not stored again, nor recorded again.
    await messages.append(sid, "user", "again", 3, source_id="m1")
    await messages.append(sid, "user", "again", 3, source_id="m1")
    tools = ToolRecordRepo(db)
    await tools.add(
        sid,
        ALICE,
        "memory",
        "{}",
        "secret result",
        True,
        T0 + 2,
        event_name="memory",
        started_at=T0 + 1,
    )
    await tools.add(sid, ALICE, "made up by the model", "{}", "no", False, T0 + 3)
    assert await SummaryRepo(db).save(sid, "secret summary", 1, 4, T0 + 4, actor="supervisor")
    found = await events(db, session_id=sid)
    assert kinds(found) == [
        "session.started",
        "message.appended",
        "message.appended",
        "tool.started",
        "tool.completed",
        "tool.completed",
        "summary.updated",
    ]
    assert found[1].payload == {"message_id": hello.id, "role": "user", "seq_order": 1}
    assert found[1].at == T0 and found[1].user_id == ALICE
    # One write for the call: tool.started carries when it started, just before the end.
    assert (found[3].at, found[3].payload) == (T0 + 1, {"name": "memory"})
    assert found[4].id == found[3].id + 1 and found[4].at == T0 + 2
    assert found[4].payload["name"] == "memory" and found[4].payload["ok"] is True
    assert found[5].payload["name"] == "unknown"  # a name the model made up is not kept
    assert (found[6].payload, found[6].actor) == (
        {"covered_seq": 1, "token_estimate": 4},
        "supervisor",
    )
    assert "secret" not in str([e.payload for e in found])


async def test_a_write_to_a_purged_session_records_nothing(db: Database) -> None:
    with pytest.raises(SessionGone):
        await ToolRecordRepo(db).add("gone", ALICE, "memory", "{}", "x", True, T0, started_at=T0)
    with pytest.raises(SessionGone):
        await MessageRepo(db).append("gone", "user", "x", 1)
    assert await events(db) == []


async def test_facts_record_their_lifecycle_and_pins(db: Database) -> None:
    sid = await SessionRepo(db).create("tui", "local", ALICE)
    store = FactStore(db)
    likes = Observation(None, "preference", "likes tea")
    [created] = await store.observe(ALICE, [likes], session_id=sid, message_id=1, now=T0)
    await store.observe(ALICE, [likes], session_id=sid, message_id=1, now=T0)
    coffee = Observation(None, "preference", "likes coffee", replaces=True)
    [replacing] = await store.observe(ALICE, [coffee], session_id=sid, message_id=2, now=T0)
    fid = created.fact_id
    await store.set_pinned(ALICE, replacing.fact_id, True, now=T0)
    await store.set_pinned(ALICE, replacing.fact_id, False, now=T0)
    assert await store.decay(T0 + 60 * DAY) == 2
    await store.update(fid, confidence=0.9, actor="cli:ops", now=T0 + 61 * DAY)
    assert await store.delete(FactFilter(ids=(fid,)), actor="cli:ops") == 1
    found = await events(db, user_id=ALICE, types=FACT_TYPES)
    assert [(e.type, e.payload["fact_id"], e.actor) for e in found] == [
        ("fact.created", fid, None),
        ("fact.reinforced", fid, None),
        ("fact.contradicted", fid, None),
        ("fact.created", replacing.fact_id, None),
        ("pin.added", replacing.fact_id, None),
        ("pin.removed", replacing.fact_id, None),
        ("fact.decayed", fid, "supervisor"),
        ("fact.decayed", replacing.fact_id, "supervisor"),
        ("fact.edited", fid, "cli:ops"),
        ("fact.deleted", fid, "cli:ops"),
    ]
    assert found[0].session_id == sid and found[0].payload["reason"] == "extracted"
    assert found[4].payload["kind"] == "fact"
    assert "tea" not in str([e.payload for e in found])


FACT_TYPES = (
    "fact.created",
    "fact.reinforced",
    "fact.contradicted",
    "fact.decayed",
    "fact.edited",
    "fact.deleted",
    "pin.added",
    "pin.removed",
)


async def test_memories_record_saves_and_deletes_with_the_operator(db: Database) -> None:
    repo = MemoryRepo(db)
    saved = await repo.save(ALICE, "city", "Lisbon", max_count=10)
    await repo.save(ALICE, "city", "Porto", max_count=10, actor="api:admin-ke")
    assert await repo.delete(ALICE, "city", actor="cli:ops")
    assert not await repo.delete(ALICE, "city")  # nothing deleted, nothing recorded
    found = await events(db, user_id=ALICE)
    assert [(e.type, e.payload, e.actor) for e in found] == [
        ("memory.saved", {"memory_id": saved.id, "created": True}, None),
        ("memory.saved", {"memory_id": saved.id, "created": False}, "api:admin-ke"),
        ("memory.deleted", {"memory_id": saved.id}, "cli:ops"),
    ]


async def test_a_purge_records_its_request_and_a_cancel_deletes_nothing(db: Database) -> None:
    sid = await SessionRepo(db).create("tui", "local", ALICE)
    await MessageRepo(db).append(sid, "user", "hello", 1)
    operator = Actor("cli:ops", operator=True)
    controller = PrivacyController(db)
    pending = await controller.request(SessionScope(sid), operator)
    assert await controller.confirm(pending.token, operator, "n") is None
    found = await events(db, types=("purge.requested", "purge.confirmed", "purge.completed"))
    assert [(e.type, e.user_id, e.session_id, e.actor) for e in found] == [
        ("purge.requested", ALICE, sid, "cli:ops")
    ]
    assert found[0].payload == {"scope": "session", "total": pending.plan.counts.total}
    pending = await controller.request(SessionScope(sid), operator)
    assert await controller.confirm(pending.token, operator, "y") is not None
    left = await events(db)
    # The session's events (its purge's request and confirmation too) went with it.
    assert [(e.type, e.user_id, e.session_id) for e in left] == [("purge.completed", None, None)]
    assert left[0].payload["counts"]["messages"] == 1


async def test_retention_prunes_old_events_and_those_of_expired_sessions(db: Database) -> None:
    sessions, messages = SessionRepo(db), MessageRepo(db)
    old = await sessions.create("tui", "old", ALICE)
    await messages.append(old, "user", "long ago", 1, created_at=T0 - 100 * DAY)
    await db.execute_write(
        "UPDATE sessions SET created_at = ?, last_active = ? WHERE id = ?",
        (T0 - 100 * DAY, T0 - 100 * DAY, old),
    )
    # Newer than the cutoff, but about a session that expires: it goes with the session.
    await SummaryRepo(db).save(old, "s", 1, 1, T0)
    new = await sessions.create("tui", "new", ALICE)
    await messages.append(new, "user", "today", 1, created_at=T0)
    await MemoryRepo(db).save(ALICE, "city", "Lisbon", max_count=10, now=T0 - 100 * DAY)
    # The old session's start is old too (written with the wall clock, moved back here).
    await db.execute_write("UPDATE events SET at = ? WHERE session_id = ?", (T0 - 100 * DAY, old))

    report = await RetentionTask(db, max_age_days=90, clock=lambda: T0).run()
    assert report.counts.sessions == 1
    left = await events(db)
    assert {e.session_id for e in left if e.session_id} == {new}
    assert "memory.saved" not in kinds(left)  # older than the cutoff
    [done] = [e for e in left if e.type == "retention.completed"]
    assert done.actor == "supervisor" and done.payload["counts"]["sessions"] == 1
