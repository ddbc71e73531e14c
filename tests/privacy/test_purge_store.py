"""PurgeStore: counts equal what deletes remove, scopes touch nothing else, batches yield."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import pytest

from picobot.store.connection import AsyncConnection
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.summaries import SummaryRepo
from picobot.store.conversation.tool_records import ToolRecordRepo
from picobot.store.db import Database
from picobot.store.erasure.erase import erase_residue
from picobot.store.erasure.purge import PurgeCounts, PurgeStore
from picobot.store.retrieval.search import SearchIndex, user_token

T = TypeVar("T")

ALICE = "test:alice"
BOB = "test:bob"
DAY = 86_400.0
T0 = 1_700_000_000.0


# --- builders shared with test_retention and test_erasure ------------------------------


async def add_session(db: Database, user_id: str, sid: str, *, at: float = T0) -> str:
    """A session created and last active at ``at``, current for its chat."""
    async with db.transaction() as conn:
        await conn.execute(
            "INSERT INTO sessions (id, channel, chat_id, user_id, created_at, last_active)"
            " VALUES (?, 'test', ?, ?, ?, ?)",
            (sid, "chat-" + sid, user_id, at, at),
        )
        await conn.execute(
            "INSERT INTO current_sessions (channel, chat_id, user_id, session_id)"
            " VALUES ('test', ?, ?, ?)",
            (f"chat-{sid}", user_id, sid),
        )
    return sid


async def add_message(
    db: Database, sid: str, content: str, *, at: float = T0, role: str = "user"
) -> int:
    """Append a message created at ``at``; return its seq_order."""
    return (await MessageRepo(db).append(sid, role, content, 5, created_at=at)).seq_order


async def add_memory(db: Database, user_id: str, key: str, content: str, at: float = T0) -> None:
    await MemoryRepo(db).save(user_id, key, content, max_count=1000, now=at)


async def add_summary(db: Database, sid: str, text: str, covered_seq: int, at: float = T0) -> None:
    assert await SummaryRepo(db).save(sid, text, covered_seq, 5, at)


async def add_tool(db: Database, sid: str, user_id: str, text: str, at: float = T0) -> None:
    arguments = f'{{"q": "{text}"}}'
    await ToolRecordRepo(db).add(sid, user_id, "memory_search", arguments, text, True, at)


async def table_counts(db: Database) -> dict[str, int]:
    tables = ["sessions", "current_sessions", "messages", "session_summaries"]
    tables += ["user_memories", "tool_records", "search_index", "search_pending"]
    tables += ["message_vectors"]
    counts = {}
    for table in tables:
        row = await db.fetchone(f"SELECT COUNT(*) FROM {table}")  # noqa: S608
        assert row is not None
        counts[table] = int(row[0])
    # Recall index entries: indexed, or queued for the indexer.
    counts["index_entries"] = counts["search_index"] + counts["search_pending"]
    return counts


async def integrity_ok(db: Database) -> None:
    """The SQLite file, its foreign keys and its FTS5 index check out (PostgreSQL enforces
    its foreign keys as it writes and has no FTS5: nothing to check there)."""
    if not db.engine.file:
        return
    row = await db.fetchone("PRAGMA integrity_check")
    assert row is not None and row[0] == "ok"
    row = await db.fetchone("PRAGMA foreign_key_check")
    assert row is None
    # FTS5's own check compares the index with its content table.
    await db.execute_write("INSERT INTO search_index (search_index) VALUES ('integrity-check')")


async def two_users(db: Database) -> None:
    """Alice: two sessions (a1 with summary, tool records, a tool message), memories.
    Bob: one session and a memory, plus a tool record he left in Alice's a2.
    a1's messages are in the recall index, the others still queued for it."""
    await add_session(db, ALICE, "a1")
    for text in ("hello pizza", "pizza is great", "more pizza"):
        await add_message(db, "a1", text)
    await add_message(db, "a1", "tool output pizza", role="tool")  # not indexed
    # a1 is indexed (the runtime's indexer ran); a2 and b1 stay queued.
    assert await SearchIndex(db).index_pending() == 3
    await add_summary(db, "a1", "talked about pizza", 2)
    await add_tool(db, "a1", ALICE, "pizza")
    await add_tool(db, "a1", ALICE, "pasta")
    await add_session(db, ALICE, "a2")
    await add_message(db, "a2", "second session pizza")
    await add_memory(db, ALICE, "food", "pizza")
    await add_memory(db, ALICE, "pet", "a cat")
    await add_session(db, BOB, "b1")
    await add_message(db, "b1", "bob likes pizza")
    await add_message(db, "b1", "bob reply", role="assistant")
    await add_tool(db, "b1", BOB, "pizza")
    await add_tool(db, "a2", BOB, "shared")
    await add_memory(db, BOB, "food", "pizza too")


# --- PurgeCounts ------------------------------------------------------------------------


def test_describe_names_every_kind_with_plurals() -> None:
    counts = PurgeCounts(3, 120, 1, 5, 125, 2)
    assert counts.describe() == (
        "3 sessions, 120 messages, 1 summary, 5 memories, 125 index entries, 2 tool records"
    )
    one = PurgeCounts(sessions=1, messages=1, memories=1, index_entries=1, tool_records=1)
    assert one.describe() == "1 session, 1 message, 1 memory, 1 index entry, 1 tool record"
    assert PurgeCounts(webhook_rows=2).describe() == "2 webhook queue entries"
    assert PurgeCounts().describe() == "nothing"
    assert counts.total == 256 and PurgeCounts().total == 0
    assert counts + one == PurgeCounts(4, 121, 1, 6, 126, 3)


# --- session scope ----------------------------------------------------------------------


async def test_delete_session_removes_exactly_what_it_counted(db: Database) -> None:
    await two_users(db)
    store = PurgeStore(db)
    plan = await store.count_session("a1")
    assert plan == PurgeCounts(
        sessions=1, messages=4, summaries=1, memories=0, index_entries=3, tool_records=2
    )
    before = await table_counts(db)
    assert await store.delete_session("a1", batch_size=2) == plan
    after = await table_counts(db)
    assert before["messages"] - after["messages"] == 4
    assert before["index_entries"] - after["index_entries"] == 3
    assert before["current_sessions"] - after["current_sessions"] == 1
    # Alice's other session, her memories and all of Bob stay.
    assert await MessageRepo(db).count("a2") == 1
    assert await MemoryRepo(db).count(ALICE) == 2
    hits = await SearchIndex(db).search(ALICE, ["pizza"])
    assert sorted(h.text for h in hits) == ["food: pizza", "second session pizza"]
    assert await store.count_session("a1") == PurgeCounts()
    assert await store.delete_session("a1") == PurgeCounts()
    await integrity_ok(db)


async def test_unknown_session_counts_nothing(db: Database) -> None:
    await two_users(db)
    assert await PurgeStore(db).count_session("nope") == PurgeCounts()
    before = await table_counts(db)
    assert await PurgeStore(db).delete_session("nope") == PurgeCounts()
    assert await table_counts(db) == before


# --- user scope -------------------------------------------------------------------------


async def test_delete_user_removes_all_of_theirs_and_nothing_else(db: Database) -> None:
    await two_users(db)
    store = PurgeStore(db)
    plan = await store.count_user(ALICE)
    # Bob's tool record in Alice's session goes with the session.
    assert plan == PurgeCounts(
        sessions=2, messages=5, summaries=1, memories=2, index_entries=6, tool_records=3
    )
    bob_before = await store.count_user(BOB)
    assert await store.delete_user(ALICE, batch_size=1) == plan
    for table in ("sessions", "current_sessions", "user_memories", "tool_records"):
        row = await db.fetchone(
            f"SELECT COUNT(*) FROM {table} WHERE user_id = ?",  # noqa: S608
            (ALICE,),
        )
        assert row is not None and row[0] == 0, table
    owner = await db.fetchone(
        "SELECT COUNT(*) FROM search_index WHERE owner = ?", (user_token(ALICE),)
    )
    assert owner is not None and owner[0] == 0
    assert await SearchIndex(db).search(ALICE, ["pizza"]) == []
    # Bob lost only his tool record in Alice's session.
    assert await store.count_user(BOB) == PurgeCounts(
        sessions=1, messages=2, memories=1, index_entries=3, tool_records=1
    )
    assert bob_before.tool_records == 2
    assert len(await SearchIndex(db).search(BOB, ["pizza"])) == 2
    await integrity_ok(db)


async def test_delete_user_takes_their_tool_records_from_sessions_of_others(
    db: Database,
) -> None:
    await two_users(db)
    await add_tool(db, "b1", ALICE, "left in bob's session")
    plan = await PurgeStore(db).count_user(ALICE)
    assert plan.tool_records == 4
    assert await PurgeStore(db).delete_user(ALICE) == plan
    rows = await db.fetchall("SELECT user_id FROM tool_records ORDER BY id")
    assert [r[0] for r in rows] == [BOB]


# --- age scope (details of the rules in test_retention) ---------------------------------


async def test_delete_older_matches_count_and_spares_memories(db: Database) -> None:
    old, new = T0 - 100 * DAY, T0
    await add_session(db, ALICE, "old", at=old)
    for i in range(3):
        await add_message(db, "old", f"old {i}", at=old)
    await add_tool(db, "old", ALICE, "old tool", at=old)
    await add_tool(db, "old", ALICE, "newer tool in an expired session", at=new)
    await add_memory(db, ALICE, "kept", "memories never expire", at=old)
    await add_session(db, BOB, "mixed", at=old)
    await add_message(db, "mixed", "old bob", at=old)
    await add_message(db, "mixed", "new bob", at=new)
    store = PurgeStore(db)
    cutoff = T0 - 90 * DAY
    plan = await store.count_older(cutoff)
    assert plan == PurgeCounts(
        sessions=1, messages=4, summaries=0, memories=0, index_entries=4, tool_records=2
    )
    assert await store.delete_older(cutoff, batch_size=3) == plan
    assert await MemoryRepo(db).count(ALICE) == 1
    assert await MessageRepo(db).count("mixed") == 1
    assert await store.count_older(cutoff) == PurgeCounts()
    await integrity_ok(db)


async def test_batch_size_must_be_positive(db: Database) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        await PurgeStore(db).delete_user(ALICE, batch_size=0)


# --- batching ---------------------------------------------------------------------------


async def test_big_purge_runs_in_batches_and_lets_other_writers_in(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await add_session(db, ALICE, "a1")
    await add_session(db, BOB, "b1")
    async with db.transaction() as conn:
        await conn.executemany(
            "INSERT INTO messages (session_id, seq_order, role, content, token_estimate,"
            " created_at) VALUES ('a1', ?, 'user', 'words', 1, ?)",
            [(i, T0) for i in range(1, 51)],
        )
    events: list[str] = []
    real = db.transaction

    @asynccontextmanager
    async def traced() -> AsyncIterator[AsyncConnection]:
        async with real() as conn:
            # Recorded once the writer lock is held: the order writers got in.
            task = asyncio.current_task()
            events.append(task.get_name() if task else "?")
            yield conn

    monkeypatch.setattr(db, "transaction", traced)
    real_write = db.write

    async def traced_write(fn: Callable[[sqlite3.Connection], T]) -> T:
        def run(conn: sqlite3.Connection) -> T:
            events.append("chat")  # in the writer thread, under the writer lock
            return fn(conn)

        return await real_write(run)

    monkeypatch.setattr(db, "write", traced_write)

    async def chat() -> None:
        for i in range(3):
            await add_message(db, "b1", f"turn {i}")

    purging = asyncio.create_task(PurgeStore(db).delete_session("a1", batch_size=7), name="purge")
    chatter = asyncio.create_task(chat(), name="chat")
    counts = await purging
    await chatter
    assert counts.messages == 50 and counts.index_entries == 50
    purge = [i for i, name in enumerate(events) if name == "purge"]
    # ceil(50 / 7) = 8 message batches, one empty probe, then the other tables.
    assert len(purge) >= 9
    chat_turns = [i for i, name in enumerate(events) if name == "chat"]
    assert chat_turns and all(purge[0] < i < purge[-1] for i in chat_turns)
    assert await MessageRepo(db).count("b1") == 3


@pytest.mark.sqlite_only
async def test_erase_residue_reports_each_step_it_ran(db: Database) -> None:
    timings: dict[str, float] = {}
    await erase_residue(db, timings=timings)
    assert list(timings) == ["fts_optimize_s", "vacuum_s", "checkpoint_passive_s", "checkpoint_s"]
    assert all(t >= 0 for t in timings.values())
    skipped: dict[str, float] = {}
    await erase_residue(db, vacuum=False, timings=skipped)
    assert "vacuum_s" not in skipped
