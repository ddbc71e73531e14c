"""Ranked recall: keyword matches with the messages around them, best first."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.retrieval.recall import RecallQuery, recall_records
from picobot.store.retrieval.search import SearchHit, SearchIndex
from tests.store.search.test_search import ALICE, BOB, add_memory, new_session


@pytest.fixture
async def db(tmp_path: Path) -> Database:
    database = await Database.open(tmp_path / "c.db")
    yield database  # type: ignore[misc]
    await database.close()


async def say(db: Database, sid: str, *texts: str) -> list[int]:
    """Store ``texts`` in turn as user and assistant messages; their ids."""
    repo = MessageRepo(db)
    ids = []
    for i, text in enumerate(texts):
        ids.append((await repo.append(sid, "user" if i % 2 == 0 else "assistant", text, 4)).id)
    await SearchIndex(db).index_pending(None)
    return ids


async def recall(db: Database, user: str, *terms: str, **kw: object) -> list[SearchHit]:
    query = RecallQuery(user, terms, **kw)  # type: ignore[arg-type]
    return await db.read(lambda conn: recall_records(conn, query))


async def test_a_match_brings_the_messages_with_content_around_it(db: Database) -> None:
    sid = await new_session(db, ALICE)
    await say(
        db,
        sid,
        "I finally repainted the old rowboat",
        "ok",
        "what colour did you pick for the rowboat?",
        "ok",
        "teal with a white stripe",
        "thanks!",
        "the weather is turning cold",
        "ok",
    )
    hits = await recall(db, ALICE, "colour", neighbours=1)
    texts = [h.text for h in hits]
    # The match first, then one message with content on each side; "ok" is skipped.
    assert texts == [
        "what colour did you pick for the rowboat?",
        "I finally repainted the old rowboat",
        "teal with a white stripe",
    ]
    assert hits[1].score == hits[2].score == pytest.approx(hits[0].score * 0.5)
    assert [h.role for h in hits] == ["user", "user", "user"]


async def test_neighbours_decay_with_distance(db: Database) -> None:
    sid = await new_session(db, ALICE)
    await say(db, sid, "one apple", "two pears", "three zeppelins", "four plums", "five figs")
    hits = await recall(db, ALICE, "zeppelins", neighbours=2, neighbour_decay=0.5)
    scores = {h.text: h.score for h in hits}
    top = scores["three zeppelins"]
    assert scores["two pears"] == scores["four plums"] == pytest.approx(top * 0.5)
    assert scores["one apple"] == scores["five figs"] == pytest.approx(top * 0.25)


async def test_no_neighbours_from_the_window_or_another_session(db: Database) -> None:
    first = await new_session(db, ALICE)
    await say(db, first, "zeppelin hangar plans", "sounds fun")
    second = await SessionRepo(db).create("test", "other-chat", ALICE)
    ids = await say(db, second, "the window holds this", "and this")
    hits = await recall(db, ALICE, "zeppelin", exclude_ids=ids)
    assert [h.text for h in hits] == ["zeppelin hangar plans", "sounds fun"]
    assert {h.session_id for h in hits} == {first}


async def test_only_the_callers_records(db: Database) -> None:
    for user in (ALICE, BOB):
        sid = await new_session(db, user)
        await say(db, sid, f"zeppelin diary of {user}", f"reply to {user}")
    hits = await recall(db, ALICE, "zeppelin")
    assert hits and all(ALICE in h.text for h in hits)


async def test_a_forks_copies_are_kept_once(db: Database) -> None:
    parent = await new_session(db, ALICE)
    await say(db, parent, "zeppelin maintenance log", "noted the hull patch")
    await SessionRepo(db).create("test", "chat-" + ALICE, ALICE, parent_session_id=parent)
    await SearchIndex(db).index_pending(None)
    hits = await recall(db, ALICE, "zeppelin")
    assert [h.text for h in hits] == ["zeppelin maintenance log", "noted the hull patch"]


async def test_memories_compete_only_when_asked_and_bring_no_neighbours(db: Database) -> None:
    sid = await new_session(db, ALICE)
    await say(db, sid, "zeppelin ride booked", "have fun")
    await add_memory(db, ALICE, "trip", "zeppelin ride over the lake")
    without = await recall(db, ALICE, "zeppelin")
    assert all(h.kind == "message" for h in without)
    with_memories = await recall(db, ALICE, "zeppelin", include_memories=True)
    memory = [h for h in with_memories if h.kind == "memory"]
    assert len(memory) == 1 and memory[0].text == "trip: zeppelin ride over the lake"
    assert len(with_memories) == len(without) + 1


async def test_context_can_be_switched_off(db: Database) -> None:
    sid = await new_session(db, ALICE)
    await say(db, sid, "zeppelin ride booked", "have fun")
    assert [h.text for h in await recall(db, ALICE, "zeppelin", neighbours=0)] == [
        "zeppelin ride booked"
    ]


async def test_only_the_neighbours_needed_are_opened(db: Database) -> None:
    # Recall reads outwards from a match and stops at the messages it needs: the others
    # in its scan (up to seven on each side) are neither opened nor tested for content.
    sid = await new_session(db, ALICE)
    texts = [f"note {w} about the garden" for w in "abcdefghi"]
    texts[4] = "the zeppelin landed in the garden"
    await say(db, sid, *texts)
    query = RecallQuery(ALICE, ["zeppelin"], neighbours=1)
    opened: list[object] = []

    def counting(value: object) -> str | None:
        opened.append(value)
        return db.sealer.open(value)

    def run(conn: sqlite3.Connection) -> list[SearchHit]:
        conn.create_function("picobot_open", 1, counting)
        try:
            return recall_records(conn, query)
        finally:
            conn.create_function("picobot_open", 1, db.sealer.open)

    hits = await db.read(run)
    assert [h.text for h in hits] == [texts[4], texts[3], texts[5]]
    # The match, and on each side the neighbour plus at most the row the cursor
    # stepped onto: not the eight rows of the scan.
    assert len(opened) <= 5
