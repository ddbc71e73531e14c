"""The privacy switches are purged with their user, leaving no byte, and exported."""

from __future__ import annotations

import json
import random

from picobot.privacy.export import iter_user_jsonl
from picobot.store.conversation.preferences import PreferenceStore
from picobot.store.db import Database
from picobot.store.erasure.erase import erase_residue
from picobot.store.erasure.purge import PurgeStore
from tests.privacy.test_erasure import T0, Person, assert_erased


async def test_purged_user_leaves_no_switch_byte_in_any_file(db: Database) -> None:
    rng = random.Random(20240502)
    alice, bob = Person("alice", rng), Person("bob", rng)
    await alice.fill(db, "a0")
    await bob.fill(db, "b0")
    prefs = PreferenceStore(db)
    for person in (alice, bob):
        await prefs.set(person.user_id, "learning", False, T0)
        await prefs.set(person.user_id, "recall", False, T0)
    await PurgeStore(db).delete_user(alice.user_id, batch_size=5)
    await erase_residue(db)
    await assert_erased(db, alice.markers, bob.markers)
    assert (await prefs.get(bob.user_id)).recall is False


async def test_the_export_holds_the_users_switches(db: Database) -> None:
    prefs = PreferenceStore(db)
    await prefs.set("tui:alice", "recall", False, T0)
    await prefs.set("tui:bob", "learning", False, T0)
    lines = [json.loads(line) async for line in iter_user_jsonl(db, "tui:alice")]
    found = [r for r in lines if r["type"] == "preferences"]
    assert found == [
        {
            "type": "preferences",
            "learning": True,
            "recall": False,
            "updated_at": found[0]["updated_at"],
        }
    ]
    assert not [r for r in lines if r.get("learning") is False]  # not Bob's
