"""The dashboard's store reads: counts, session previews and families, the timeline."""

from __future__ import annotations

import sqlite3

from picobot.store.conversation.events import record_event
from picobot.store.conversation.memories import MemoryRepo, all_memories
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.conversation.summaries import SummaryRepo
from picobot.store.conversation.timeline import session_timeline
from picobot.store.conversation.tool_records import ToolRecordRepo
from picobot.store.db import Database
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.overview import (
    recent_events,
    session_family,
    session_previews,
    store_counts,
)


async def test_a_timeline_merges_every_kind_in_time_order(db: Database) -> None:
    sid = await SessionRepo(db).create("ws", "c1", "u1")
    messages = MessageRepo(db)
    await messages.append(sid, "user", "what is the weather", 5, created_at=10.0)
    await ToolRecordRepo(db).add(sid, "u1", "weather", '{"city": "Lyon"}', "sunny", True, 11.0)
    last = await messages.append(sid, "assistant", "it is sunny", 4, created_at=12.0)
    await FactStore(db).observe(
        "u1",
        [Observation(None, "knowledge", "asks about Lyon weather", False)],
        session_id=sid,
        message_id=last.id,
        now=13.0,
    )
    await SummaryRepo(db).save(sid, "weather talk", last.seq_order, 3, 14.0)

    def events(conn: sqlite3.Connection) -> None:
        record_event(conn, "tool.started", 10.5, user_id="u1", session_id=sid, payload={"n": 1})

    await db.write(events)
    timeline = await db.read(lambda c: session_timeline(c, sid))
    assert not timeline.truncated
    items = timeline.items
    got = [(i.kind, i.title) for i in items]
    # Events the store records itself are in it (session.started, at the real time of
    # the create, and summary.updated); a message.appended, tool.completed or fact.created
    # event is not: its item is.
    assert got.count(("event", "session.started")) == 1
    got = [g for g in got if g != ("event", "session.started")]
    assert got == [
        ("message", "user"),
        ("event", "tool.started"),
        ("tool", "weather"),
        ("message", "assistant"),
        ("fact", got[4][1]),
        ("summary", f"summary of messages 1-{last.seq_order}"),
        ("event", "summary.updated"),
    ]
    assert items[[i.kind for i in items].index("fact")].body == "asks about Lyon weather"
    tool = next(i for i in items if i.kind == "tool")
    assert tool.body == "sunny" and tool.details["ok"] == "yes"
    assert (await db.read(lambda c: session_timeline(c, "nope"))).items == []


async def test_a_timeline_limit_counts_only_what_it_shows_and_says_when_it_cuts(
    db: Database,
) -> None:
    sid = await SessionRepo(db).create("ws", "c1", "u1")
    messages = MessageRepo(db)
    for n in range(3):
        last = await messages.append(sid, "user", f"message {n}", 2, created_at=10.0 + n)
    await SummaryRepo(db).save(sid, "a summary", last.seq_order, 3, 20.0)
    # Four of each kind: the three message.appended events (shown as their messages)
    # must not use up the events' share, or summary.updated would be left out.
    timeline = await db.read(lambda c: session_timeline(c, sid, limit=4))
    events = [i.title for i in timeline.items if i.kind == "event"]
    assert sorted(events) == ["session.started", "summary.updated"]
    assert not timeline.truncated
    for n in range(2):
        await messages.append(sid, "user", f"later {n}", 2, created_at=30.0 + n)
    longer = await db.read(lambda c: session_timeline(c, sid, limit=4))
    assert longer.truncated
    assert [i.body for i in longer.items if i.kind == "message"] == [
        "message 0",
        "message 1",
        "message 2",
        "later 0",
    ]


async def test_previews_search_and_families(db: Database) -> None:
    sessions = SessionRepo(db)
    messages = MessageRepo(db)
    root = await sessions.create("ws", "c1", "u1")
    await messages.append(root, "user", "tell me about " + "volcanoes " * 30, 5)
    fork = await sessions.create("ws", "c1", "u1", parent_session_id=root)
    await messages.append(fork, "user", "and glaciers?", 5)
    grandchild = await sessions.create("ws", "c1", "u1", parent_session_id=fork)
    other = await sessions.create("tg", "c2", "u2")
    await messages.append(other, "user", "Pineapple pizza", 5)

    every = await db.read(
        lambda c: session_previews(c, user_id=None, text=None, limit=10, offset=0)
    )
    assert {p.info.id for p in every} == {root, fork, grandchild, other}
    by_id = {p.info.id: p for p in every}
    assert by_id[root].preview.startswith("tell me about volcanoes")
    assert by_id[root].preview.endswith("…") and len(by_id[root].preview) == 121
    assert by_id[root].forks == 1 and by_id[other].preview == "Pineapple pizza"
    found = await db.read(
        lambda c: session_previews(c, user_id=None, text="PINEAPPLE", limit=10, offset=0)
    )
    assert [p.info.id for p in found] == [other]
    mine = await db.read(lambda c: session_previews(c, user_id="u1", text=None, limit=2, offset=0))
    assert len(mine) == 2 and all(p.info.user_id == "u1" for p in mine)
    assert await db.read(lambda c: session_family(c, grandchild)) == ([fork, root], [])
    assert await db.read(lambda c: session_family(c, root)) == ([], [fork])


async def test_counts_memories_and_recent_events(db: Database) -> None:
    sid = await SessionRepo(db).create("ws", "c1", "u1")
    await MessageRepo(db).append(sid, "user", "hi", 1)
    memories = MemoryRepo(db)
    await memories.save("u1", "pet", "a cat", max_count=10)
    await memories.save("u2", "food", "soup", max_count=10)
    await memories.save("u3", "city", "Oslo", max_count=10)
    await FactStore(db).observe(
        "u4", [Observation(None, "knowledge", "x", False)], session_id=None, message_id=None, now=1
    )
    counts = await db.read(store_counts)
    assert (counts.users, counts.sessions, counts.messages) == (4, 1, 1)
    assert (counts.facts, counts.memories) == (1, 3)
    assert len(await db.read(lambda c: all_memories(c, None, 2))) == 2
    assert [m.key for m in await db.read(lambda c: all_memories(c, "u2", 10))] == ["food"]

    def write(conn: sqlite3.Connection) -> None:
        for n in range(5):
            record_event(conn, "retention.completed", float(n), payload={"n": n})
        # Ids with gaps, as purges and retention leave them.
        conn.execute("DELETE FROM events WHERE payload_json IN ('{\"n\":2}', '{\"n\":3}')")

    await db.write(write)
    newest = await db.read(lambda c: recent_events(c, 3))
    assert [e.payload.get("n") for e in newest] == [4, 1, 0]
