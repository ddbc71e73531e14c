"""Per-user keys: the master key's sources, the key store, sealing, rotation, binding."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from picobot.config.keys import KeySettings
from picobot.config.settings import Settings
from picobot.errors import ConfigError, StoreUnavailable
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound
from picobot.runtime import open_database, open_runtime
from picobot.services.search import SearchService
from picobot.store.keys import open_keyring
from picobot.store.keys.keyring import KEY_STORE_FILE
from picobot.store.keys.master import (
    DEFAULT_KEY_FILE,
    PENDING_SUFFIX,
    encode_key,
    new_key,
    write_key_file,
)
from picobot.store.keys.rotation import rotate_master_key
from picobot.store.keys.sealing import ERASED, Sealer
from picobot.store.retrieval.search import SearchIndex
from tests.privacy.test_erasure import scan

ALICE = Identity("tui", "tui:alice", "local")
BOB = Identity("tui", "tui:bob", "local")


def test_first_run_makes_a_private_key_file_and_key_store(tmp_path: Path) -> None:
    ring = open_keyring(tmp_path, KeySettings(), {})
    ring.close()
    for name in (DEFAULT_KEY_FILE, KEY_STORE_FILE):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
    # Opened again: the same store, the same key.
    again = open_keyring(tmp_path, KeySettings(), {})
    assert again.store_id == ring.store_id
    again.close()


def test_sealed_text_holds_no_plaintext_and_reads_as_erased_once_forgotten(
    tmp_path: Path,
) -> None:
    ring = open_keyring(tmp_path, KeySettings(), {})
    sealer = Sealer(ring)
    sealed = sealer.seal("alice", "my dentist is Doctor Quokkaberg")
    other = sealer.seal("bob", "Bob's own words")
    assert isinstance(sealed, bytes) and b"Quokkaberg" not in sealed
    assert sealer.open(sealed) == "my dentist is Doctor Quokkaberg"
    assert sealer.seal("alice", "same") != sealer.seal("alice", "same")  # fresh nonce
    tampered = bytearray(sealed)
    tampered[-1] ^= 1
    assert sealer.open(bytes(tampered)) == ERASED
    assert sealer.forget("alice") is True
    assert sealer.open(sealed) == ERASED
    assert sealer.open(other) == "Bob's own words"
    assert sealer.open("stored in clear") == "stored in clear"
    ring.close()
    # Gone from the file too, not only from the cache.
    ring = open_keyring(tmp_path, KeySettings(), {})
    assert Sealer(ring).open(sealed) == ERASED
    assert Sealer(ring).open(other) == "Bob's own words"
    ring.close()


def test_a_lost_key_file_is_an_error_never_a_new_key(tmp_path: Path) -> None:
    open_keyring(tmp_path, KeySettings(), {}).close()
    (tmp_path / DEFAULT_KEY_FILE).unlink()
    with pytest.raises(ConfigError, match=r"master key file .* is missing"):
        open_keyring(tmp_path, KeySettings(), {})
    assert not (tmp_path / DEFAULT_KEY_FILE).exists()


def test_a_wrong_or_malformed_master_key_is_a_clear_error(tmp_path: Path) -> None:
    open_keyring(tmp_path, KeySettings(), {}).close()
    with pytest.raises(ConfigError, match="does not open the key store"):
        open_keyring(tmp_path, KeySettings(), {"PICOBOT_MASTER_KEY": encode_key(new_key())})
    with pytest.raises(ConfigError, match="not a PicoBot master key"):
        open_keyring(tmp_path, KeySettings(), {"PICOBOT_MASTER_KEY": "hunter2"})
    secret = tmp_path / "secret"
    secret.write_text("not base64 at all!")
    with pytest.raises(ConfigError, match=f"master key file {secret}"):
        open_keyring(tmp_path, KeySettings(master_key_file=str(secret)), {})


def test_the_environment_key_opens_a_store_it_made(tmp_path: Path) -> None:
    env = {"PICOBOT_MASTER_KEY": encode_key(new_key())}
    ring = open_keyring(tmp_path, KeySettings(), env)
    sealed = Sealer(ring).seal("alice", "hello")
    ring.close()
    assert not (tmp_path / DEFAULT_KEY_FILE).exists()
    ring = open_keyring(tmp_path, KeySettings(), env)
    assert Sealer(ring).open(sealed) == "hello"
    ring.close()


def test_rotation_rewraps_keys_and_only_the_new_master_opens_the_store(tmp_path: Path) -> None:
    ring = open_keyring(tmp_path, KeySettings(), {})
    sealed = Sealer(ring).seal("alice", "before rotation")
    ring.close()
    old = (tmp_path / DEFAULT_KEY_FILE).read_text()
    done = rotate_master_key(tmp_path, KeySettings(), environ={})
    assert done.rewrapped == 1 and done.key_file == tmp_path / DEFAULT_KEY_FILE
    assert (tmp_path / DEFAULT_KEY_FILE).read_text() != old
    assert stat.S_IMODE((tmp_path / DEFAULT_KEY_FILE).stat().st_mode) == 0o600
    ring = open_keyring(tmp_path, KeySettings(), {})
    assert Sealer(ring).open(sealed) == "before rotation"  # the data was not touched
    ring.close()
    with pytest.raises(ConfigError, match="does not open"):
        open_keyring(tmp_path, KeySettings(), {"PICOBOT_MASTER_KEY": old.strip()})


def test_a_rotation_killed_before_the_rename_is_finished_at_the_next_start(
    tmp_path: Path,
) -> None:
    ring = open_keyring(tmp_path, KeySettings(), {})
    sealed = Sealer(ring).seal("alice", "survives")
    new = new_key()
    pending = tmp_path / (DEFAULT_KEY_FILE + PENDING_SUFFIX)
    write_key_file(pending, new)
    ring.rotate(new)  # ... and the process dies before master.key.new replaces master.key
    ring.close()
    ring = open_keyring(tmp_path, KeySettings(), {})
    assert Sealer(ring).open(sealed) == "survives"
    ring.close()
    assert not pending.exists()
    assert (tmp_path / DEFAULT_KEY_FILE).read_text().strip() == encode_key(new)


def test_rotation_with_the_key_in_the_environment_needs_the_new_key(tmp_path: Path) -> None:
    env = {"PICOBOT_MASTER_KEY": encode_key(new_key())}
    open_keyring(tmp_path, KeySettings(), env).close()
    with pytest.raises(ConfigError, match="--new-key-file"):
        rotate_master_key(tmp_path, KeySettings(), environ=env)
    new = new_key()
    write_key_file(tmp_path / "next.key", new)
    assert rotate_master_key(tmp_path, KeySettings(), tmp_path / "next.key", env).key_file is None
    open_keyring(tmp_path, KeySettings(), {"PICOBOT_MASTER_KEY": encode_key(new)}).close()


def settings(tmp_path: Path) -> Settings:
    return Settings(data={"dir": str(tmp_path / "data")})


async def say(rt: object, who: Identity, text: str) -> None:
    from picobot.runtime import Runtime

    assert isinstance(rt, Runtime)
    async for _ in rt.kernel.handle(Inbound(who, text)):
        pass


async def test_chat_text_is_sealed_in_the_files_and_still_found_by_search(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider(["Noted.", "Noted too."])
    async with open_runtime(settings(tmp_path), provider=provider) as rt:
        await say(rt, ALICE, "my dentist is Quokkaberg and I love pizzas")
        await say(rt, BOB, "quokkaberg is a word bob says too")
        search: SearchService = rt.services.search
        hits = await search.hits(ALICE.user_id, ["pizza", "quokkaberg"], 10)
        await rt.db.checkpoint()
        data = rt.db.path.parent
        index = await rt.db.fetchall("SELECT body FROM search_index")
    assert any("Quokkaberg" in h.text for h in hits)
    assert all("bob" not in h.text for h in hits)  # scoped to the user
    # Neither the messages nor the recall index hold the words in clear.
    assert scan(data, ["Quokkaberg", "quokkaberg", "pizzas"]) == {}
    assert not any("pizza" in str(r[0]) or "quokk" in str(r[0]) for r in index)


async def test_a_database_is_refused_under_another_key_store(tmp_path: Path) -> None:
    async with open_runtime(settings(tmp_path), provider=ScriptedProvider(["ok"])) as rt:
        await say(rt, ALICE, "hello")
    data = tmp_path / "data"
    (data / KEY_STORE_FILE).unlink()  # lost; the master key file is still there
    with pytest.raises(StoreUnavailable, match="is sealed with key store"):
        async with open_database(settings(tmp_path)):
            pass


async def test_an_unkeyed_database_gets_its_index_rebuilt_under_keys(tmp_path: Path) -> None:
    from picobot.store.conversation.messages import MessageRepo
    from picobot.store.conversation.sessions import SessionRepo
    from picobot.store.db import Database

    db_path = tmp_path / "data" / "conversations.db"
    plain = await Database.open(db_path)  # no key store: stored in clear, words in clear
    sid = await SessionRepo(plain).create("tui", "local", ALICE.user_id)
    await MessageRepo(plain).append(sid, "user", "the zanzibar archipelago", 3)
    await plain.close()
    async with open_runtime(settings(tmp_path), provider=ScriptedProvider([])) as rt:
        hits = await rt.services.search.hits(ALICE.user_id, ["zanzibar"], 10)
        index = await rt.db.fetchall("SELECT body FROM search_index")
    assert [h.text for h in hits] == ["the zanzibar archipelago"]
    assert not any("zanzibar" in str(r[0]) for r in index)


def test_key_files_are_never_world_readable(tmp_path: Path) -> None:
    os.umask(0o022)
    open_keyring(tmp_path, KeySettings(), {}).close()
    conn = sqlite3.connect(tmp_path / KEY_STORE_FILE)
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert {"meta", "user_keys"} <= names
    assert stat.S_IMODE((tmp_path / KEY_STORE_FILE).stat().st_mode) & 0o077 == 0


def test_long_words_are_not_stemmed_and_word_forms_still_match() -> None:
    from picobot.store.retrieval.terms import keyed_word, stem

    # The stemmer's work is not linear in a word's length: a long word is only folded.
    assert stem("Running") == "run"
    assert stem("A" * 65 + "ING") == "a" * 65 + "ing"
    key = b"k" * 32
    assert keyed_word(key, "Pizzas") == keyed_word(key, "pizza")
    assert keyed_word(key, "Généralement") == keyed_word(key, "generalement")
    assert keyed_word(key, "pizza") != keyed_word(b"o" * 32, "pizza")


def test_a_forgotten_key_is_gone_even_when_its_user_left_the_cache_first(
    tmp_path: Path,
) -> None:
    ring = open_keyring(tmp_path, KeySettings(), {})
    sealer = Sealer(ring)
    sealed = sealer.seal("alice", "hello")
    assert sealer.open(sealed) == "hello"  # alice's key is cached by its id
    ring._kid_of.clear()  # the user cache evicted her; the id cache did not
    assert sealer.forget("alice")
    assert sealer.open(sealed) == ERASED
    ring.close()


async def test_a_reading_command_is_refused_under_another_key_store_too(tmp_path: Path) -> None:
    async with open_runtime(settings(tmp_path), provider=ScriptedProvider(["ok"])) as rt:
        await say(rt, ALICE, "hello")
    data = tmp_path / "data"
    (data / KEY_STORE_FILE).unlink()
    open_keyring(data, KeySettings(), {}).close()  # a new, empty store under the same key
    with pytest.raises(StoreUnavailable, match="is sealed with key store"):
        async with open_database(settings(tmp_path), schema="current"):
            pass


async def test_names_from_before_sealed_names_are_found_and_sealed_when_saved_again(
    tmp_path: Path,
) -> None:
    from picobot.store.conversation.memories import MemoryRepo
    from picobot.store.db import Database
    from picobot.store.learned.fact_rules import Observation
    from picobot.store.learned.fact_writes import FactStore
    from picobot.store.migrations import MIGRATIONS, apply_migrations

    old = await Database.open(tmp_path / "data" / "conversations.db", migrate=False)
    await apply_migrations(old, MIGRATIONS[:24])  # before m025: names in clear, no tags
    await old.execute_write(
        "INSERT INTO user_memories (user_id, key, content, created_at, updated_at)"
        " VALUES (?, 'dentist', 'Doctor Quokkaberg', 1, 1)",
        (ALICE.user_id,),
    )
    await old.execute_write(
        "INSERT INTO facts (user_id, subject, category, text, confidence, created_at,"
        " updated_at) VALUES (?, 'wombat', 'personal', 'has a pet', 0.7, 1, 1)",
        (ALICE.user_id,),
    )
    await old.close()
    async with open_database(settings(tmp_path)) as db:
        notes = MemoryRepo(db)
        found = await notes.get(ALICE.user_id, "dentist")
        assert found is not None and found.content == "Doctor Quokkaberg"
        assert await notes.get(BOB.user_id, "dentist") is None
        saved = await notes.save(ALICE.user_id, "dentist", "Doctor Platypus", max_count=5)
        assert saved.key == "dentist" and await notes.count(ALICE.user_id) == 1
        row = await db.fetchone("SELECT key, key_tag FROM user_memories")
        assert row is not None and isinstance(row[0], bytes) and b"dentist" not in row[0]
        assert isinstance(row[1], bytes) and len(row[1]) == 32
        seen = Observation("wombat", "personal", "has a pet")
        applied = await FactStore(db).observe(
            ALICE.user_id, [seen], session_id=None, message_id=None, now=2.0
        )
        assert [a.outcome for a in applied] == ["reinforced"]  # the clear row, not a copy
        hits = await SearchIndex(db).search(ALICE.user_id, ["dentist"])
        assert [h.text for h in hits] == ["dentist: Doctor Platypus"]
    # A database opened without its key store reads sealed names as erased.
    plain = await Database.open(tmp_path / "data" / "conversations.db")
    try:
        assert [m.key for m in await MemoryRepo(plain).list(ALICE.user_id)] == [ERASED]
    finally:
        await plain.close()


def test_a_key_another_process_deleted_is_never_used_here(tmp_path: Path) -> None:
    # Two processes' key rings on one key store: `other` purges alice meanwhile.
    here = open_keyring(tmp_path, KeySettings(), {})
    other = open_keyring(tmp_path, KeySettings(), {})
    sealer = Sealer(here)
    old = sealer.seal("alice", "before the purge")
    kept = sealer.seal("bob", "bob's words")
    assert isinstance(old, bytes) and isinstance(kept, bytes)
    assert not here.refresh()  # its own writes (the keys it made) change nothing
    assert other.forget("alice")
    # Sealing checks the file first: alice's next text gets a new key ...
    new = sealer.seal("alice", "after the purge")
    assert isinstance(new, bytes) and new[1:9] != old[1:9]
    # ... and the database refreshes as each read begins: the old key opens nothing.
    sealer.refresh()
    assert sealer.open(old) == ERASED
    assert sealer.open(kept) == "bob's words"
    here.close()
    other.close()
    again = Sealer(open_keyring(tmp_path, KeySettings(), {}))
    assert again.open(new) == "after the purge"  # a restart reads what was sealed since
    assert again.ring is not None
    again.ring.close()


def test_only_another_process_commit_empties_the_key_cache(tmp_path: Path) -> None:
    here = open_keyring(tmp_path, KeySettings(), {})
    other = open_keyring(tmp_path, KeySettings(), {})
    here.key("alice")
    here.forget("bob")
    assert not here.refresh()
    other.key("carol")  # a new user's key, made by the other process
    assert here.refresh()
    assert not here.refresh()
    here.close()
    assert not here.refresh()  # closed: nothing cached, nothing to look at
    other.close()
