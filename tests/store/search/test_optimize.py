"""Compacting the recall index after deletes: merge steps that let other writes in."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import picobot.store.retrieval.search as search_module
from picobot.store.conversation.messages import MessageRepo
from picobot.store.db import Database
from picobot.store.migrations import MIGRATIONS, apply_migrations
from picobot.store.retrieval.search import SearchIndex
from picobot.store.retrieval.search_writes import tidy_step
from tests.store.search.test_search import ALICE, BOB, integrity_check, new_session

SECRET = b"qxzanzibarq"


async def segments_mention_secret(db: Database) -> bool:
    rows = await db.fetchall("SELECT block FROM search_index_data")
    return any(SECRET in bytes(r[0]) for r in rows if r[0] is not None)


async def many_segments_then_delete(db: Database, batches: int = 12) -> str:
    """An index of ``batches`` segments (one per indexer commit), the secret deleted."""
    sid = await new_session(db, ALICE)
    repo = MessageRepo(db)
    rng = random.Random(7)
    secret = await repo.append(sid, "user", f"{SECRET.decode()} is my secret", 5)
    for _ in range(batches):
        for _ in range(20):
            # Many distinct words, so each segment spans several index pages.
            words = " ".join(f"w{rng.getrandbits(40):x}" for _ in range(40))
            await repo.append(sid, "user", f"okapi {words}", 50)
        assert await SearchIndex(db).index_pending() > 0
    await db.execute_write("DELETE FROM messages WHERE id = ?", (secret.id,))
    # A plain FTS5 delete only appends a delete marker (repeating the tokens).
    assert await segments_mention_secret(db)
    return sid


@pytest.mark.sqlite_only
async def test_optimize_in_steps_drops_deleted_text_and_keeps_the_rest(db: Database) -> None:
    await many_segments_then_delete(db)
    steps = await SearchIndex(db).optimize(step_pages=1)
    assert steps > 2
    assert not await segments_mention_secret(db)
    assert len(await SearchIndex(db).search(ALICE, ["okapi"], limit=100)) == 100
    assert await SearchIndex(db).search(ALICE, [SECRET.decode()]) == []
    await integrity_check(db)
    # Compacted: a second run finds nothing left to merge.
    assert await SearchIndex(db).optimize(step_pages=1) == 1


@pytest.mark.sqlite_only
async def test_writes_go_on_between_the_merge_steps(db: Database) -> None:
    sid = await many_segments_then_delete(db)
    other = await new_session(db, BOB)
    repo = MessageRepo(db)
    optimize = asyncio.create_task(SearchIndex(db).optimize(step_pages=1))
    written = 0
    while not optimize.done():
        # One write at a time, each awaited: it lands only when the writer is free.
        await repo.append(other, "user", f"bob chats on {written}", 5)
        written += 1
    steps = await optimize
    # One 'optimize' would have kept the writer until it was done: at most one write
    # (the one queued behind it) could have finished meanwhile.
    assert written >= steps // 2 > 1
    assert not await segments_mention_secret(db)
    assert await MessageRepo(db).count(other) == written
    assert await MessageRepo(db).count(sid) == 12 * 20
    await integrity_check(db)


async def test_the_background_indexer_waits_for_an_optimize(db: Database) -> None:
    sid = await new_session(db, ALICE)
    await MessageRepo(db).append(sid, "user", "the okapi at the zoo", 5)
    index = SearchIndex(db)
    async with db.search_compaction:
        # A segment added now would make FTS5 start the merge over.
        assert await index.index_in_background() == 0
        assert await index.search(ALICE, ["okapi"]) != []  # an explicit search still indexes
    await MessageRepo(db).append(sid, "user", "a second okapi", 5)
    assert await index.index_in_background() == 1


@pytest.mark.sqlite_only
async def test_merge_steps_that_never_converge_end_in_one_optimize(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await many_segments_then_delete(db, batches=3)
    calls = 0

    def busy_step(conn: object, pages: int) -> bool:
        # As if other writers kept adding segments: every step finds more to merge.
        nonlocal calls
        calls += 1
        return True

    monkeypatch.setattr(search_module, "merge_step", busy_step)
    steps = await SearchIndex(db).optimize(step_pages=1)
    assert steps == calls + 1
    assert not await segments_mention_secret(db)
    await integrity_check(db)


async def test_the_background_indexer_takes_a_backlog_in_several_writes(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = await new_session(db, ALICE)
    for n in range(7):
        await MessageRepo(db).append(sid, "user", f"okapi number {n}", 5)
    commits = 0
    write = db.write

    async def counted(fn: Callable[[sqlite3.Connection], Any]) -> Any:
        nonlocal commits
        if fn is not tidy_step:  # the merge work after the run: see the tests below
            commits += 1
        return await write(fn)

    monkeypatch.setattr(db, "write", counted)
    assert await SearchIndex(db).index_in_background(batch=3) == 7
    assert commits == 3  # 3 + 3 + 1: the last, short write ends the run
    assert len(await SearchIndex(db).search(ALICE, ["okapi"])) == 7


async def segments(db: Database) -> int:
    row = await db.fetchone("SELECT count(DISTINCT segid) FROM search_index_idx")
    assert row is not None
    return int(row[0])


async def one_segment_each(db: Database, count: int) -> tuple[str, int]:
    """Index ``count`` messages of Alice one write each; return her session, the old count."""
    sid = await new_session(db, ALICE)
    before = await segments(db)
    for n in range(count):
        await MessageRepo(db).append(sid, "user", f"okapi number {n} in the zoo", 5)
        assert await SearchIndex(db).index_pending() == 1
    # Automerge is off (m009): each indexing write added its segment and merged none.
    assert await segments(db) == before + count
    return sid, before


@pytest.mark.sqlite_only
async def test_index_writes_merge_nothing_and_tidy_does_the_merge_work(db: Database) -> None:
    _, before = await one_segment_each(db, 12)
    index = SearchIndex(db)
    steps = await index.tidy()
    assert steps >= 2  # at least one step that merged, and the one that found no more
    assert await segments(db) <= before + 3  # FTS5 merges a level once it holds four
    assert await index.tidy() == 1  # nothing left to merge
    assert len(await index.search(ALICE, ["okapi"], limit=100)) == 12
    await integrity_check(db)


@pytest.mark.sqlite_only
async def test_the_background_indexer_tidies_after_a_run_that_indexed(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid, before = await one_segment_each(db, 8)
    index = SearchIndex(db)
    tidied = 0
    tidy = index.tidy

    async def counted(**kwargs: Any) -> int:
        nonlocal tidied
        tidied += 1
        return await tidy(**kwargs)

    monkeypatch.setattr(index, "tidy", counted)
    assert await index.index_in_background() == 0  # nothing queued: no write, no tidy
    assert tidied == 0
    await MessageRepo(db).append(sid, "user", "one more okapi", 5)
    assert await index.index_in_background() == 1
    assert tidied == 1
    assert await segments(db) < before + 9


async def test_the_migration_turns_automerge_off_on_an_existing_index(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "old.db", migrate=False)
    try:
        assert await apply_migrations(db, MIGRATIONS[:8])
        config = "SELECT v FROM search_index_config WHERE k = 'automerge'"
        assert await db.fetchone(config) is None  # FTS5's default: 4
        assert await apply_migrations(db, MIGRATIONS[:9]) == ["m009_search_tidy_steps"]
        row = await db.fetchone(config)
        assert row is not None and row[0] == 0
    finally:
        await db.close()
