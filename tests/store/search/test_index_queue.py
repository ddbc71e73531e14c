"""The recall index's queue: new messages are indexed in batches (m006)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from picobot.errors import StoreUnavailable
from picobot.store.conversation.messages import MessageRepo
from picobot.store.db import Database
from picobot.store.migrations import MIGRATIONS, apply_migrations
from picobot.store.retrieval.search import SearchIndex, SearchQuery, search_records
from tests.store.search.test_search import (
    ALICE,
    BOB,
    index_rows,
    integrity_check,
    new_session,
    old_message,
    old_session,
)


async def queued(db: Database) -> list[int]:
    return [int(r[0]) for r in await db.fetchall("SELECT id FROM search_pending ORDER BY id")]


async def recall(db: Database, user: str, term: str) -> list[str]:
    """What the retriever's read finds (it never indexes first)."""
    query = SearchQuery(user, [term])
    return [h.text for h in await db.read(lambda conn: search_records(conn, query))]


async def test_a_new_message_is_queued_and_found_once_indexed(db: Database) -> None:
    sid = await new_session(db, ALICE)
    msg = await MessageRepo(db).append(sid, "user", "the okapi at the zoo", 5)
    assert await queued(db) == [msg.id]
    assert await index_rows(db) == 0
    assert await recall(db, ALICE, "okapi") == []

    assert await SearchIndex(db).index_pending() == 1
    assert await queued(db) == []
    assert await recall(db, ALICE, "okapi") == ["the okapi at the zoo"]
    assert await recall(db, BOB, "okapi") == []
    assert await SearchIndex(db).index_pending() == 0
    await integrity_check(db)


async def test_only_user_and_assistant_messages_are_queued(db: Database) -> None:
    sid = await new_session(db, ALICE)
    repo = MessageRepo(db)
    for role in ("user", "assistant", "tool", "system"):
        await repo.append(sid, role, f"{role} says quokka", 5)
    assert len(await queued(db)) == 2
    await SearchIndex(db).index_pending()
    found = sorted(await recall(db, ALICE, "quokka"))
    assert found == ["assistant says quokka", "user says quokka"]


async def test_an_explicit_search_indexes_the_queue_first(db: Database) -> None:
    sid = await new_session(db, ALICE)
    await MessageRepo(db).append(sid, "user", "my tapir is called Tim", 5)
    hits = await SearchIndex(db).search(ALICE, ["tapir"])
    assert [h.text for h in hits] == ["my tapir is called Tim"]
    assert await queued(db) == []


async def test_a_run_takes_at_most_its_limit_oldest_first(db: Database) -> None:
    sid = await new_session(db, ALICE)
    repo = MessageRepo(db)
    ids = [(await repo.append(sid, "user", f"numbat number {i}", 5)).id for i in range(7)]
    index = SearchIndex(db)
    assert await index.index_pending(3) == 3
    assert await queued(db) == ids[3:]
    assert await index_rows(db) == 3
    assert await index.index_pending(None) == 4
    assert await index_rows(db) == 7


async def test_a_deleted_queued_message_is_never_indexed(db: Database) -> None:
    sid = await new_session(db, ALICE)
    repo = MessageRepo(db)
    gone = await repo.append(sid, "user", "secret wombat plans", 5)
    kept = await repo.append(sid, "user", "public wombat facts", 5)
    await db.execute_write("DELETE FROM messages WHERE id = ?", (gone.id,))
    assert await queued(db) == [kept.id]
    assert await SearchIndex(db).index_pending() == 1
    assert await recall(db, ALICE, "wombat") == ["public wombat facts"]
    if db.engine.name == "sqlite":  # FTS5's segments (PostgreSQL's index holds no text)
        blocks = await db.fetchall("SELECT block FROM search_index_data")
        assert not any(b"secret" in bytes(r[0]) for r in blocks if r[0] is not None)


async def test_an_edited_message_leaves_the_index_at_once_and_is_queued_again(
    db: Database,
) -> None:
    sid = await new_session(db, ALICE)
    msg = await MessageRepo(db).append(sid, "user", "the old axolotl text", 5)
    await SearchIndex(db).index_pending()
    await db.execute_write(
        "UPDATE messages SET content = picobot_seal(?, ?) WHERE id = ?",
        (ALICE, "the new capybara text", msg.id),
    )
    assert await recall(db, ALICE, "axolotl") == []
    assert await queued(db) == [msg.id]
    await SearchIndex(db).index_pending()
    assert await recall(db, ALICE, "capybara") == ["the new capybara text"]
    # Turned into a tool message: out of the index and not queued.
    await db.execute_write("UPDATE messages SET role = 'tool' WHERE id = ?", (msg.id,))
    assert await queued(db) == []
    assert await recall(db, ALICE, "capybara") == []
    await integrity_check(db)


async def test_m006_keeps_the_index_and_queues_only_new_messages(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "c.db", migrate=False)
    try:
        assert await apply_migrations(db, MIGRATIONS[:5])
        sid = await old_session(db, ALICE)
        await old_message(db, sid, "user", "an indexed pangolin")
        assert await index_rows(db) == 1  # m005's trigger indexes in the transaction
        assert await apply_migrations(db, MIGRATIONS[:6]) == ["m006_deferred_message_index"]
        new_id = await old_message(db, sid, "user", "a queued pangolin")
        assert await queued(db) == [new_id]
        assert await recall(db, ALICE, "pangolin") == ["an indexed pangolin"]
        hits = await SearchIndex(db).search(ALICE, ["pangolin"])
        assert sorted(h.text for h in hits) == ["a queued pangolin", "an indexed pangolin"]
    finally:
        await db.close()


async def test_search_while_another_process_holds_the_write_lock_answers_from_the_index(
    tmp_path: Path,
) -> None:
    db = await Database.open(tmp_path / "c.db", busy_timeout_ms=100)
    try:
        sid = await new_session(db, ALICE)
        await MessageRepo(db).append(sid, "user", "an indexed ibis", 5)
        await SearchIndex(db).index_pending()
        await MessageRepo(db).append(sid, "user", "a queued ibis", 5)
        other = sqlite3.connect(db.path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            hits = await SearchIndex(db).search(ALICE, ["ibis"])
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert [h.text for h in hits] == ["an indexed ibis"]
        # Once the lock is gone the queued message is indexed and found.
        hits = await SearchIndex(db).search(ALICE, ["ibis"])
        assert sorted(h.text for h in hits) == ["a queued ibis", "an indexed ibis"]
    finally:
        await db.close()


async def test_an_empty_queue_never_waits_for_the_write_lock(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "c.db", busy_timeout_ms=100)
    other = sqlite3.connect(db.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        # Idle: nothing queued, so the runtime's indexer does not touch the writer.
        assert await SearchIndex(db).index_pending() == 0
        other.execute("ROLLBACK")
        sid = await new_session(db, ALICE)
        await MessageRepo(db).append(sid, "user", "a queued ibex", 5)
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailable):
            await SearchIndex(db).index_pending()
        other.execute("ROLLBACK")
        assert await SearchIndex(db).index_pending() == 1
    finally:
        other.close()
        await db.close()
