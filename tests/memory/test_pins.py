"""Message pins through the assembled runtime: /pin, /unpin, /pins, retention, purges."""

from __future__ import annotations

import time
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Outbound
from picobot.runtime import Runtime, open_runtime
from picobot.store.conversation.events import EventFilter, list_events
from picobot.store.erasure.erase import erase_residue
from picobot.store.erasure.purge import PurgeStore
from picobot.store.learned.fact_rules import Observation
from picobot.store.retrieval.search import SearchIndex
from picobot.tasks.retention import RetentionTask
from tests.memory.test_learning_turns import ALICE, BOB, say, settings
from tests.privacy.test_erasure import scan

DAY = 86_400.0


def text(events: list[Outbound]) -> str:
    return "\n".join(e.text for e in events if e.text)


async def ids(rt: Runtime, session_id: str) -> list[int]:
    rows = await rt.db.fetchall(
        "SELECT id FROM messages WHERE session_id = ? ORDER BY seq_order", (session_id,)
    )
    return [int(r[0]) for r in rows]


async def test_pin_keeps_the_last_exchange_past_retention_and_in_recall(tmp_path: Path) -> None:
    provider = ScriptedProvider(["Lisbon is lovely", "Porto is fine", "ok"])
    async with open_runtime_with(tmp_path, provider) as rt:
        first = await say(rt, ALICE, "tell me about lisbonzzx")
        sid = first[-1].session_id or ""
        await say(rt, ALICE, "and portozzx?")
        pinned = text(await say(rt, ALICE, "/pin"))
        all_ids = await ids(rt, sid)
        assert f"#{all_ids[2]} and #{all_ids[3]}" in pinned  # the last user message + reply
        pin_events = EventFilter(types=("pin.added", "pin.removed"))
        added = await rt.db.read(lambda c: list_events(c, pin_events, 10))
        listed = text(await say(rt, ALICE, "/pins"))
        assert "portozzx" in listed and "Porto is fine" in listed and "lisbonzzx" not in listed
        # 120 days later retention runs: the pinned exchange and its session stay.
        later = RetentionTask(rt.db, max_age_days=90, clock=lambda: time.time() + 120 * DAY)
        report = await later.run()
        assert report.counts.messages == 2 and report.counts.sessions == 0
        assert await ids(rt, sid) == all_ids[2:]
        hits = await SearchIndex(rt.db).search(ALICE.user_id, ["portozzx"])
        assert [h.row_id for h in hits] == [all_ids[2]]
        assert scan(rt.db.path.parent, ["lisbonzzx"]) == {}  # the unpinned one is erased
        # Unpinned, it expires at the next run.
        assert "Unpinned" in text(await say(rt, ALICE, f"/unpin message {all_ids[2]}"))
        # (Retention prunes events by age, so they are read before it runs again.)
        removed = await rt.db.read(lambda c: list_events(c, pin_events, 10))
        await later.run()
        assert await ids(rt, sid) == [all_ids[3]]
    events = added + removed
    assert [(e.type, e.payload["message_id"]) for e in events] == [
        ("pin.added", all_ids[2]),
        ("pin.added", all_ids[3]),
        ("pin.removed", all_ids[2]),
    ]
    assert all(e.user_id == ALICE.user_id and e.session_id == sid for e in events)


async def test_another_users_message_is_not_found_and_pins_stay_private(tmp_path: Path) -> None:
    async with open_runtime_with(tmp_path, ScriptedProvider(["hi alice", "hi bob"])) as rt:
        sid = (await say(rt, ALICE, "secret plan"))[-1].session_id or ""
        await say(rt, BOB, "hello")
        alice_ids = await ids(rt, sid)
        refused = text(await say(rt, BOB, f"/pin message {alice_ids[0]}"))
        missing = text(await say(rt, BOB, "/pin message 999999"))
        assert refused == missing.replace("999999", str(alice_ids[0]))
        assert "No message" in refused
        assert "Usage" in text(await say(rt, ALICE, "/pin something"))
        for number in ("²", "1" * 25):  # str.isdigit accepts "²"; 25 digits overflow SQLite
            assert "Usage" in text(await say(rt, ALICE, f"/pin message {number}"))
        await say(rt, ALICE, f"/pin message {alice_ids[0]}")
        assert "No message" in text(await say(rt, BOB, f"/unpin message {alice_ids[0]}"))
        bob_pins = text(await say(rt, BOB, "/pins"))
        alice_pins = text(await say(rt, ALICE, "/pins"))
    assert "secret plan" not in bob_pins and "No pinned messages" in bob_pins
    assert "secret plan" in alice_pins


async def test_pinned_messages_die_with_session_and_user_purges(tmp_path: Path) -> None:
    async with open_runtime_with(tmp_path, ScriptedProvider(["a1", "a2", "b1"])) as rt:
        one = (await say(rt, ALICE, "first pinnedmarkeronex"))[-1].session_id or ""
        await say(rt, ALICE, "/pin")
        await say(rt, ALICE, "/new")
        two = (await say(rt, ALICE, "second pinnedmarkertwox"))[-1].session_id or ""
        await say(rt, ALICE, "/pin")
        await say(rt, BOB, "bob pinnedmarkerbobx")
        await say(rt, BOB, "/pin")
        assert one != two
        counts = await PurgeStore(rt.db).delete_session(one)
        assert counts.messages == 2
        remaining = await rt.db.fetchall("SELECT session_id FROM message_pins ORDER BY 1")
        assert {r[0] for r in remaining} == {two, (await ids_session(rt, BOB.user_id))}
        await PurgeStore(rt.db).delete_user(ALICE.user_id)
        await erase_residue(rt.db)
        left = await rt.db.fetchall("SELECT user_id FROM message_pins")
        kept = await rt.db.fetchall("SELECT picobot_open(content) FROM messages")
        found = scan(
            rt.db.path.parent, ["pinnedmarkeronex", "pinnedmarkertwox", "pinnedmarkerbobx"]
        )
    assert [r[0] for r in left] == [BOB.user_id] * 2  # Bob's exchange
    assert any("pinnedmarkerbobx" in str(r[0]) for r in kept)
    # Bob's words are sealed in the files: no scan finds any of the three.
    assert found == {}


async def test_pin_fact_still_pins_a_fact_and_pins_lists_both(tmp_path: Path) -> None:
    async with open_runtime_with(tmp_path, ScriptedProvider(["ok"])) as rt:
        await say(rt, ALICE, "I like green tea")
        assert rt.learning is not None
        [applied] = await rt.learning.store.observe(
            ALICE.user_id,
            [Observation("tea", "preference", "likes green tea")],
            session_id=None,
            message_id=None,
            now=time.time(),
        )
        assert "pinned" in text(await say(rt, ALICE, f"/pin fact {applied.fact_id}"))
        await say(rt, ALICE, "/pin")
        listed = text(await say(rt, ALICE, "/pins"))
        events = await rt.db.read(lambda c: list_events(c, EventFilter(types=("pin.added",)), 10))
    assert "Pinned messages:" in listed and "I like green tea" in listed
    assert "Pinned facts:" in listed and "likes green tea" in listed
    # A fact's pin events come from its history (picobot.store.learned.fact_rows).
    messages = [e for e in events if e.payload.get("kind") == "message"]
    assert len(messages) == 2 and all(e.user_id == ALICE.user_id for e in messages)


async def ids_session(rt: Runtime, user_id: str) -> str:
    row = await rt.db.fetchone("SELECT id FROM sessions WHERE user_id = ?", (user_id,))
    assert row is not None
    return str(row[0])


def open_runtime_with(
    tmp_path: Path, provider: ScriptedProvider
) -> AbstractAsyncContextManager[Runtime]:
    # Reflections stay out of these scripts (tests/tasks/test_reflection.py covers them).
    return open_runtime(settings(tmp_path, reflections=False), provider=provider)
