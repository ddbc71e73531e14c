"""Memory revisions (m008_memory_revisions) and the cache that trusts them."""

from __future__ import annotations

from pathlib import Path

from picobot.privacy.controller import PrivacyController
from picobot.privacy.scopes import Actor, UserScope
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.conversation.memory_cache import MemoryCache
from picobot.store.db import Database
from picobot.store.keys.sealing import tag_matches
from picobot.store.migrations import MIGRATIONS, apply_migrations
from tests.conftest import StoreOpener

ALICE, BOB = "tui:alice", "tui:bob"


async def revision(db: Database, user: str) -> int | None:
    row = await db.fetchone("SELECT rev FROM memory_revisions WHERE user_id = ?", (user,))
    return None if row is None else int(row[0])


async def purge_elsewhere(open_store: StoreOpener, user: str) -> None:
    """Purge ``user`` as the CLI does: another process, on its own connections."""
    other = await open_store()
    try:
        controller = PrivacyController(other)
        plan = await controller.plan(UserScope(user), Actor("admin", operator=True))
        await controller.execute(plan)
    finally:
        await other.close()


MOVE = "UPDATE user_memories SET user_id = ?1 WHERE user_id = ?2 AND " + tag_matches(  # noqa: S608
    "key_tag", "key", "?2", "?3"
)
"""Hands owner ?2's note named ?3 to ?1."""


async def test_every_change_gives_the_user_a_new_revision(db: Database) -> None:
    repo = MemoryRepo(db)
    assert await revision(db, ALICE) is None
    await repo.save(ALICE, "pet", "a cat", max_count=10)
    first = await revision(db, ALICE)
    await repo.save(ALICE, "pet", "a dog", max_count=10)  # an edit (UPSERT)
    second = await revision(db, ALICE)
    await repo.save(ALICE, "city", "Lyon", max_count=10)
    third = await revision(db, ALICE)
    await repo.save(BOB, "pet", "a fish", max_count=10)
    assert await revision(db, ALICE) == third  # another user's change is not Alice's
    assert first is not None and second is not None and third is not None
    assert first < second < third

    assert await repo.delete(ALICE, "pet")
    fourth = await revision(db, ALICE)
    assert fourth is not None and fourth > third
    # The last delete takes the row: no user id stays behind without memories.
    assert await repo.delete(ALICE, "city")
    assert await revision(db, ALICE) is None
    # Values are never reused, even after the row went: no old list can match again.
    await repo.save(ALICE, "pet", "a cat", max_count=10)
    fifth = await revision(db, ALICE)
    assert fifth is not None and fifth > fourth


async def test_moving_a_memory_to_another_user_changes_both(db: Database) -> None:
    repo = MemoryRepo(db)
    await repo.save(ALICE, "a", "one", max_count=10)
    await repo.save(ALICE, "b", "two", max_count=10)
    before = await revision(db, ALICE)
    await db.execute_write(MOVE, (BOB, ALICE, "a"))
    after = await revision(db, ALICE)
    assert before is not None and after is not None and after > before
    assert await revision(db, BOB) is not None
    await db.execute_write(MOVE, (BOB, ALICE, "b"))
    assert await revision(db, ALICE) is None


async def test_the_migration_gives_existing_memories_a_revision(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "old.db", migrate=False)
    try:
        assert await apply_migrations(db, MIGRATIONS[:7])
        await db.execute_write(
            "INSERT INTO user_memories (user_id, key, content, created_at, updated_at)"
            " VALUES (?, 'pet', 'a cat', 1, 1)",
            (ALICE,),
        )
        assert await apply_migrations(db, MIGRATIONS[:8]) == ["m008_memory_revisions"]
        assert await revision(db, ALICE) is not None
        assert await revision(db, BOB) is None
        await apply_migrations(db)  # the cache reads today's columns
        cache = MemoryCache()
        got = await db.read(lambda conn: cache.memories(conn, ALICE, 20))
        assert [m.content for m in got.items] == ["a cat"]
    finally:
        await db.close()


async def test_an_unchanged_list_is_reused_and_a_changed_one_reread(
    db: Database, open_store: StoreOpener
) -> None:
    repo = MemoryRepo(db)
    cache = MemoryCache()
    await repo.save(ALICE, "pet", "a cat", max_count=10)
    first = await db.read(lambda conn: cache.memories(conn, ALICE, 20))
    again = await db.read(lambda conn: cache.memories(conn, ALICE, 20))
    assert again is first
    assert [m.content for m in first.items] == ["a cat"]

    # Another process edits it: the next read sees the edit.
    other = await open_store()
    try:
        await other.execute_write(
            "UPDATE user_memories SET content = picobot_seal(?1, ?2) WHERE user_id = ?1",
            (ALICE, "a dog"),
        )
    finally:
        await other.close()
    edited = await db.read(lambda conn: cache.memories(conn, ALICE, 20))
    assert edited is not first
    assert [m.content for m in edited.items] == ["a dog"]

    # A different limit is a different list.
    await repo.save(ALICE, "city", "Lyon", max_count=10)
    one = await db.read(lambda conn: cache.memories(conn, ALICE, 1))
    assert len(one.items) == 1
    two = await db.read(lambda conn: cache.memories(conn, ALICE, 20))
    assert len(two.items) == 2

    # Deleting them all leaves nothing to show and nothing held.
    await db.execute_write("DELETE FROM user_memories WHERE user_id = ?", (ALICE,))
    gone = await db.read(lambda conn: cache.memories(conn, ALICE, 20))
    assert gone.items == () and gone.rev is None
    assert len(cache) == 0


async def test_the_cache_holds_at_most_its_size_oldest_read_first(db: Database) -> None:
    repo = MemoryRepo(db)
    users = [f"tui:u{i}" for i in range(3)]
    for user in users:
        await repo.save(user, "k", f"note of {user}", max_count=10)
    cache = MemoryCache(max_users=2)
    held = [await db.read(lambda conn, u=u: cache.memories(conn, u, 20)) for u in users]
    assert len(cache) == 2
    # The first user's list was dropped (read again: a new object); the last is kept.
    assert await db.read(lambda conn: cache.memories(conn, users[2], 20)) is held[2]
    assert await db.read(lambda conn: cache.memories(conn, users[0], 20)) is not held[0]


async def test_prune_drops_what_a_purge_in_another_process_removed(
    db: Database, open_store: StoreOpener
) -> None:
    repo = MemoryRepo(db)
    cache = MemoryCache()
    await repo.save(ALICE, "secret", "my PIN is 4321", max_count=10)
    await repo.save(BOB, "pet", "a fish", max_count=10)
    for user in (ALICE, BOB):
        await db.read(lambda conn, u=user: cache.memories(conn, u, 20))
    assert await db.read(cache.prune) == 0  # nothing changed yet
    assert len(cache) == 2

    await purge_elsewhere(open_store, ALICE)

    assert await db.read(cache.prune) == 1
    assert len(cache) == 1  # Bob's list stays
    bob = await db.read(lambda conn: cache.memories(conn, BOB, 20))
    assert [m.content for m in bob.items] == ["a fish"]
    alice = await db.read(lambda conn: cache.memories(conn, ALICE, 20))
    assert alice.items == ()
