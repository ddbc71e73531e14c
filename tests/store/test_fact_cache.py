"""Fact revisions (m029_fact_revisions) and the cache of prompt facts that trusts them."""

from __future__ import annotations

from pathlib import Path

from picobot.config.learning import LearningSettings
from picobot.store.db import Database
from picobot.store.learned.fact_cache import FactCache
from picobot.store.learned.fact_rules import lifecycle_rules, observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.migrations import MIGRATIONS, apply_migrations
from tests.conftest import StoreOpener
from tests.store.test_memory_cache import purge_elsewhere

ALICE, BOB = "tui:alice", "tui:bob"
FLOOR, MOST = 0.3, 50


def facts_of(db: Database) -> FactStore:
    return FactStore(db, rules=lifecycle_rules(LearningSettings()))


async def learn(db: Database, user: str, text: str) -> int:
    found = observation(None, "preference", text)
    return (await facts_of(db).create(user, found, confidence=None, actor="test", now=1.0)).id


async def revision(db: Database, user: str) -> int | None:
    row = await db.fetchone("SELECT rev FROM fact_revisions WHERE user_id = ?", (user,))
    return None if row is None else int(row[0])


async def test_every_change_gives_the_user_a_new_revision(db: Database) -> None:
    assert await revision(db, ALICE) is None
    first_id = await learn(db, ALICE, "likes tea")
    first = await revision(db, ALICE)
    await facts_of(db).update(first_id, confidence=0.9, actor="test", now=2.0)
    second = await revision(db, ALICE)
    await learn(db, BOB, "likes coffee")
    assert await revision(db, ALICE) == second  # another user's change is not Alice's
    assert first is not None and second is not None and first < second
    # The last delete takes the row: no user id stays behind without facts.
    await db.execute_write("DELETE FROM facts WHERE user_id = ?", (ALICE,))
    assert await revision(db, ALICE) is None
    await learn(db, ALICE, "likes tea")
    third = await revision(db, ALICE)
    assert third is not None and third > second  # values are never reused


async def test_the_migration_gives_existing_facts_a_revision(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "old.db", migrate=False)
    try:
        before = [m.__name__ for m in MIGRATIONS].index("m029_fact_revisions")
        assert await apply_migrations(db, MIGRATIONS[:before])
        await learn(db, ALICE, "likes tea")
        assert await apply_migrations(db) == ["m029_fact_revisions"]
        assert await revision(db, ALICE) is not None
        assert await revision(db, BOB) is None
        cache = FactCache()
        got = await db.read(lambda conn: cache.facts(conn, ALICE, FLOOR, MOST))
        assert [f.text for f in got.items] == ["likes tea"]
    finally:
        await db.close()


async def test_an_unchanged_list_is_reused_and_a_changed_one_reread(
    db: Database, open_store: StoreOpener
) -> None:
    cache = FactCache()
    fact_id = await learn(db, ALICE, "likes tea")
    first = await db.read(lambda conn: cache.facts(conn, ALICE, FLOOR, MOST))
    again = await db.read(lambda conn: cache.facts(conn, ALICE, FLOOR, MOST))
    assert again is first
    assert [f.text for f in first.items] == ["likes tea"]

    # Another process edits it: the next read sees the edit.
    other = await open_store()
    try:
        await facts_of(other).update(fact_id, text="likes green tea", actor="test", now=2.0)
    finally:
        await other.close()
    edited = await db.read(lambda conn: cache.facts(conn, ALICE, FLOOR, MOST))
    assert edited is not first
    assert [f.text for f in edited.items] == ["likes green tea"]
    # Other parameters are another read.
    fewer = await db.read(lambda conn: cache.facts(conn, ALICE, 0.95, MOST))
    assert fewer.items == ()


async def test_prune_drops_what_a_purge_in_another_process_removed(
    db: Database, open_store: StoreOpener
) -> None:
    cache = FactCache()
    await learn(db, ALICE, "my PIN is 4321")
    await learn(db, BOB, "has a fish")
    for user in (ALICE, BOB):
        await db.read(lambda conn, u=user: cache.facts(conn, u, FLOOR, MOST))
    assert await db.read(cache.prune) == 0  # nothing changed yet
    assert len(cache) == 2

    await purge_elsewhere(open_store, ALICE)

    assert await db.read(cache.prune) == 1
    assert len(cache) == 1  # Bob's list stays
    alice = await db.read(lambda conn: cache.facts(conn, ALICE, FLOOR, MOST))
    assert alice.items == () and alice.rev is None
