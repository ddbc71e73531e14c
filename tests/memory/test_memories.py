"""MemoryRepo and the key/content rules, on a real SQLite file."""

from __future__ import annotations

import asyncio

import pytest

from picobot.errors import UserError
from picobot.store.conversation.memories import (
    GLOBAL_USER,
    MemoryRepo,
    validate_content,
    validate_key,
)
from picobot.store.db import Database
from tests.conftest import StoreOpener

ALICE = "tui:alice"
BOB = "tui:bob"


@pytest.fixture
def repo(db: Database) -> MemoryRepo:
    """The repository on the test database."""
    return MemoryRepo(db)


@pytest.mark.parametrize("key", ["pet", "favourite_color", "a1_b2", "x", "k" * 64, "x__"])
def test_valid_keys_pass_unchanged(key: str) -> None:
    assert validate_key(key) == key


def test_key_surrounding_spaces_are_stripped() -> None:
    assert validate_key("  pet \n") == "pet"


@pytest.mark.parametrize(
    ("key", "rule"),
    [
        ("Pet", "lowercase letters"),
        ("PET", "lowercase letters"),
        ("1pet", "starting with a letter"),
        ("_pet", "starting with a letter"),
        ("my-key", "lowercase letters, digits and underscores"),
        ("pet name", "lowercase letters, digits and underscores"),
        ("clé", "lowercase letters, digits and underscores"),
        ("k" * 65, "65 characters long; at most 64"),
        ("system_prompt", "starting with 'system_' are reserved"),
        ("internal_state", "starting with 'internal_' are reserved"),
        ("", "needs a key"),
        ("   ", "needs a key"),
    ],
)
def test_invalid_keys_name_the_rule(key: str, rule: str) -> None:
    with pytest.raises(UserError) as info:
        validate_key(key)
    assert rule in str(info.value)


def test_reserved_words_inside_a_key_are_fine() -> None:
    assert validate_key("my_system_notes") == "my_system_notes"
    assert validate_key("systemic") == "systemic"


def test_content_is_stripped_and_bounded() -> None:
    assert validate_content("  a cat named Tom \n", 100) == "a cat named Tom"
    assert validate_content("x" * 100, 100) == "x" * 100
    with pytest.raises(UserError, match="needs some content"):
        validate_content(" \n\t ", 100)
    with pytest.raises(UserError, match="101 characters long; at most 100"):
        validate_content("x" * 101, 100)
    # The limit applies after stripping, so padding does not count.
    assert validate_content("  " + "x" * 100 + "  ", 100) == "x" * 100
    # Lone surrogates (a JSON escape, or a non-UTF-8 argv byte) cannot be stored.
    with pytest.raises(UserError, match="not valid Unicode"):
        validate_content("caf\udce9", 100)


async def test_save_then_get(repo: MemoryRepo) -> None:
    saved = await repo.save(ALICE, "pet", "a cat named Tom", max_count=50, now=1000.0)
    assert saved.user_id == ALICE and saved.key == "pet" and saved.content == "a cat named Tom"
    assert saved.created_at == saved.updated_at == 1000.0
    assert await repo.get(ALICE, "pet") == saved
    assert await repo.get(ALICE, "missing") is None


async def test_upsert_updates_content_and_updated_at_only(repo: MemoryRepo) -> None:
    first = await repo.save(ALICE, "pet", "a cat", max_count=50, now=1000.0)
    second = await repo.save(ALICE, "pet", "a dog named Rex", max_count=50, now=2000.0)
    assert second.id == first.id
    assert second.content == "a dog named Rex"
    assert second.created_at == 1000.0
    assert second.updated_at == 2000.0
    assert await repo.count(ALICE) == 1
    assert await repo.get(ALICE, "pet") == second


async def test_list_is_newest_updated_first_with_limit(repo: MemoryRepo) -> None:
    await repo.save(ALICE, "a", "1", max_count=50, now=1.0)
    await repo.save(ALICE, "b", "2", max_count=50, now=2.0)
    await repo.save(ALICE, "c", "3", max_count=50, now=3.0)
    assert [m.key for m in await repo.list(ALICE)] == ["c", "b", "a"]
    await repo.save(ALICE, "a", "1 again", max_count=50, now=4.0)  # touching moves it up
    assert [m.key for m in await repo.list(ALICE)] == ["a", "c", "b"]
    assert [m.key for m in await repo.list(ALICE, limit=2)] == ["a", "c"]
    assert await repo.list(ALICE, limit=0) == []


async def test_delete_reports_whether_it_existed(repo: MemoryRepo) -> None:
    await repo.save(ALICE, "pet", "a cat", max_count=50)
    assert await repo.delete(ALICE, "pet") is True
    assert await repo.delete(ALICE, "pet") is False
    assert await repo.get(ALICE, "pet") is None
    assert await repo.count(ALICE) == 0


async def test_cap_refuses_new_keys_with_a_clear_error(repo: MemoryRepo) -> None:
    await repo.save(ALICE, "a", "1", max_count=2)
    await repo.save(ALICE, "b", "2", max_count=2)
    with pytest.raises(UserError) as info:
        await repo.save(ALICE, "c", "3", max_count=2)
    assert str(info.value) == ("You already have 2 memories, the most allowed; /forget one first.")
    assert await repo.get(ALICE, "c") is None  # the refused insert left nothing behind
    assert await repo.count(ALICE) == 2
    # Updating an existing key is still allowed at the cap.
    updated = await repo.save(ALICE, "a", "one", max_count=2)
    assert updated.content == "one"
    # Another user's cap is their own.
    await repo.save(BOB, "c", "3", max_count=2)
    # Forgetting one makes room again.
    assert await repo.delete(ALICE, "b")
    await repo.save(ALICE, "c", "3", max_count=2)
    assert sorted(m.key for m in await repo.list(ALICE)) == ["a", "c"]


async def test_cap_messages_for_zero_and_for_shared_memories(repo: MemoryRepo) -> None:
    with pytest.raises(UserError, match="turned off"):
        await repo.save(ALICE, "a", "1", max_count=0)
    await repo.save(GLOBAL_USER, "a", "1", max_count=1)
    with pytest.raises(UserError, match="already 1 shared memories"):
        await repo.save(GLOBAL_USER, "b", "2", max_count=1)


async def test_concurrent_saves_from_two_connections_never_pass_the_cap(
    db: Database, open_store: StoreOpener
) -> None:
    # A second Database on the same store has its own lock, like another process: only
    # the count and insert sharing one BEGIN IMMEDIATE transaction keeps the cap.
    other = await open_store()
    try:
        repos = [MemoryRepo(db), MemoryRepo(other)]
        results = await asyncio.gather(
            *(repos[i % 2].save(ALICE, f"k{i}", "x", max_count=3) for i in range(12)),
            return_exceptions=True,
        )
    finally:
        await other.close()
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(refused) == 9
    assert all(isinstance(r, UserError) for r in refused)
    assert await MemoryRepo(db).count(ALICE) == 3


async def test_users_never_see_or_change_each_others_memories(repo: MemoryRepo) -> None:
    await repo.save(ALICE, "pet", "a cat named Tom", max_count=50)
    await repo.save(BOB, "pet", "a dog named Rex", max_count=50)
    await repo.save(GLOBAL_USER, "motto", "be kind", max_count=50)

    alice_pet = await repo.get(ALICE, "pet")
    bob_pet = await repo.get(BOB, "pet")
    assert alice_pet is not None and alice_pet.content == "a cat named Tom"
    assert bob_pet is not None and bob_pet.content == "a dog named Rex"
    assert [(m.user_id, m.key) for m in await repo.list(ALICE)] == [(ALICE, "pet")]
    assert [(m.user_id, m.key) for m in await repo.list(BOB)] == [(BOB, "pet")]
    assert await repo.get(ALICE, "motto") is None

    # Bob updating and deleting "pet" touches only his own row.
    await repo.save(BOB, "pet", "a parrot", max_count=50)
    assert await repo.get(ALICE, "pet") == alice_pet
    assert await repo.delete(BOB, "pet")
    assert await repo.get(ALICE, "pet") == alice_pet
    assert await repo.delete(BOB, "motto") is False
    assert await repo.count(GLOBAL_USER) == 1
