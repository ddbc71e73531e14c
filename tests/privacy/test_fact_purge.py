"""Purges take learned facts by their provenance; retention leaves them; recall finds them."""

from __future__ import annotations

import io
import json

from picobot.privacy.export import export_user
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.erasure.export import count_user_data
from picobot.store.erasure.purge import PurgeStore
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.learned.facts import FactFilter, fact_history, fact_sources, find_facts
from picobot.store.retrieval.search import SearchIndex, SearchQuery, search_records

T0 = 1_700_000_000.0
ALICE, BOB = "tui:alice", "tui:bob"


def obs(text: str, subject: str = "tea") -> Observation:
    return Observation(subject, "preference", text)


async def setup(db: Database) -> tuple[str, str, FactStore]:
    sessions = SessionRepo(db)
    a = await sessions.current_or_create("tui", "a", ALICE)
    b = await sessions.current_or_create("tui", "b", ALICE)
    return a, b, FactStore(db)


async def texts(db: Database, user: str) -> set[str]:
    return {f.text for f in await db.read(lambda c: find_facts(c, FactFilter(user_id=user), None))}


async def test_a_session_purge_takes_the_facts_learned_only_there(db: Database) -> None:
    a, b, store = await setup(db)
    await store.observe(
        ALICE, [obs("only in a"), obs("in both")], session_id=a, message_id=1, now=T0
    )
    [both] = await store.observe(ALICE, [obs("in both")], session_id=b, message_id=2, now=T0)
    made = await store.create(ALICE, obs("by an operator"), confidence=None, actor="cli:op", now=T0)
    await store.observe(ALICE, [obs("by an operator")], session_id=a, message_id=3, now=T0)

    plan = await PurgeStore(db).count_session(a)
    done = await PurgeStore(db).delete_session(a)

    assert plan.facts == done.facts == 1
    assert "1 learned fact" in done.describe()
    assert await texts(db, ALICE) == {"in both", "by an operator"}
    for fact_id in (both.fact_id, made.id):
        sources = await db.read(lambda c, i=fact_id: fact_sources(c, i))
        assert a not in [s.session_id for s in sources]
        history = await db.read(lambda c, i=fact_id: fact_history(c, i))
        assert a not in [h.session_id for h in history]


async def test_a_user_purge_takes_every_fact_of_the_user_only(db: Database) -> None:
    a, _, store = await setup(db)
    bob = await SessionRepo(db).current_or_create("tui", "c", BOB)
    await store.observe(ALICE, [obs("one"), obs("two")], session_id=a, message_id=1, now=T0)
    await store.create(ALICE, obs("three"), confidence=0.9, actor="cli:op", now=T0)
    await store.observe(BOB, [obs("bobs")], session_id=bob, message_id=1, now=T0)

    plan = await PurgeStore(db).count_user(ALICE)
    done = await PurgeStore(db).delete_user(ALICE)

    assert plan.facts == done.facts == 3 and plan.index_entries == done.index_entries
    assert await texts(db, ALICE) == set()
    assert await texts(db, BOB) == {"bobs"}
    left = await db.fetchone("SELECT COUNT(*) FROM fact_history")
    assert left is not None and left[0] == 1  # bob's


async def test_retention_leaves_facts_whose_messages_expired(db: Database) -> None:
    a, _, store = await setup(db)
    await store.observe(ALICE, [obs("durable")], session_id=a, message_id=1, now=T0)
    done = await PurgeStore(db).delete_older(T0 + 10**9)
    assert done.facts == 0 and await texts(db, ALICE) == {"durable"}


async def test_recall_search_returns_active_facts_of_the_caller_when_asked(db: Database) -> None:
    a, _, store = await setup(db)
    bob = await SessionRepo(db).current_or_create("tui", "c", BOB)
    [mine] = await store.observe(
        ALICE, [obs("loves matcha lattes")], session_id=a, message_id=1, now=T0
    )
    await store.observe(BOB, [obs("loves matcha too")], session_id=bob, message_id=1, now=T0)
    await SearchIndex(db).index_pending()  # as the runtime's indexer does (PostgreSQL queues)

    async def search(user: str, facts: bool) -> list[tuple[str, int, str]]:
        query = SearchQuery(user, ["matcha"], include_facts=facts)
        found = await db.read(lambda c: search_records(c, query))
        return [(h.kind, h.row_id, h.text) for h in found]

    assert await search(ALICE, False) == []
    assert await search(ALICE, True) == [("fact", mine.fact_id, "tea: loves matcha lattes")]
    assert [h[2] for h in await search(BOB, True)] == ["tea: loves matcha too"]
    # Deactivated facts leave the index; the default search (memories too) never sees facts.
    await store.update(mine.fact_id, active=False, actor="cli:op", now=T0)
    assert await search(ALICE, True) == []
    assert await SearchIndex(db).search(ALICE, ["matcha"]) == []


async def test_export_holds_the_users_facts_with_sources_and_history(db: Database) -> None:
    a, _, store = await setup(db)
    bob = await SessionRepo(db).current_or_create("tui", "c", BOB)
    [fact] = await store.observe(ALICE, [obs("likes oolong")], session_id=a, message_id=4, now=T0)
    await store.observe(ALICE, [obs("likes oolong")], session_id=a, message_id=5, now=T0 + 1)
    await store.observe(BOB, [obs("bob secret tea")], session_id=bob, message_id=1, now=T0)
    out = io.StringIO()
    stats = await export_user(db, ALICE, out)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    facts = [r for r in records if r["type"] == "fact"]
    assert stats.facts == 1 and (await count_user_data(db, ALICE)).facts == 1
    assert "bob secret tea" not in out.getvalue()
    [record] = facts
    assert record["id"] == fact.fact_id and record["text"] == "likes oolong"
    assert record["confidence"] == 0.8 and record["active"] is True
    assert [s["message_id"] for s in record["sources"]] == [4, 5]
    assert [h["reason"] for h in record["history"]] == ["extracted", "reinforced"]
    markdown = io.StringIO()
    await export_user(db, ALICE, markdown, fmt="markdown")
    assert "## Learned facts" in markdown.getvalue() and "> likes oolong" in markdown.getvalue()
