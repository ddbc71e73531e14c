"""PostgreSQL's BM25 ranks as SQLite's FTS5 does: the same corpus stored on both
engines (under one key store, so the keyed terms are the same) gives the same hits,
in the same order, with the same scores; every filter of a query keeps the same ones."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from picobot.config.keys import KeySettings
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.keys import open_keyring
from picobot.store.learned.digests import DigestStore, Provenance
from picobot.store.retrieval.search import SearchHit, SearchIndex, SearchQuery

ALICE = "telegram:1001"

# Distinct lengths and term counts: no two records tie on a query below.
MESSAGES = [
    "I had toast this morning and then went to work",
    "Orange marmalade on toast is the best marmalade",
    "nothing relevant here at all",
    "the weather was grey, grey, grey and the toast was cold",
    "ice cream after dinner, then more ice cream with the kids",
    "we bought cream for the coffee and ice for the drinks",
    "la la la la, sang the choir",
    "la di da",
    "marmalade",
    "a long message about toast, butter, bread, jam, honey, tea and a little marmalade",
    "hiking near the glaciers was the best part of the trip",
    "東京の天気は晴れです",
]
NOTES = {"breakfast": "toast with orange marmalade", "dessert": "ice cream, pistachio"}
FACT = ("coffee", "takes coffee with cream and no sugar")
REFLECTION = "they talked about toast, marmalade and the grey weather"

QUERIES: list[list[str]] = [
    ["marmalade"],
    ["marmalade", "toast"],
    ["toast", "grey"],
    ["ice cream"],
    ["cream"],
    ["la la"],
    ["la", "da"],
    ["glacier", "hikes"],
    ["東京"],
    ["天気", "toast"],
    ["coffee", "sugar"],
    ["nothing", "at all", "relevant"],
    ["absent"],
]


async def corpus(db: Database) -> tuple[str, list[int]]:
    """The same records on either engine: Alice's messages, notes, a fact and a
    reflection; her session id and message ids. Hers alone: FTS5 counts every user's
    records in a term's idf and the average length, PostgreSQL the asking user's."""
    sessions = SessionRepo(db)
    sid = await sessions.create("test", "chat", ALICE)
    repo = MessageRepo(db)
    ids = [(await repo.append(sid, "user", text, 9)).id for text in MESSAGES]
    for key, content in NOTES.items():
        await MemoryRepo(db).save(ALICE, key, content, max_count=100)
    now = time.time()
    await db.execute_write(  # FactStore's own writes are not this test's subject
        "INSERT INTO facts (user_id, subject, category, text, confidence, created_at,"
        " updated_at) VALUES (?1, picobot_seal(?1, ?2), 'preference', picobot_seal(?1, ?3),"
        " 0.8, ?4, ?4)",
        (ALICE, *FACT, now),
    )
    source = Provenance(sid, ids[0], ids[-1], 1, len(ids))
    await DigestStore(db).add_reflection(ALICE, source, REFLECTION, 12, now=time.time())
    await SearchIndex(db).index_pending(None)
    return sid, ids


@pytest.fixture
async def engines(
    tmp_path: Path, postgres_url: str
) -> AsyncIterator[tuple[tuple[Database, str, list[int]], tuple[Database, str, list[int]]]]:
    """(SQLite, PostgreSQL): each a database holding :func:`corpus`, its session, its ids."""
    ring = open_keyring(tmp_path / "keys", KeySettings(), {})
    lite = await Database.open(tmp_path / "lite" / "conversations.db", keys=ring)
    pg = await Database.open(tmp_path / "pg" / "conversations.db", url=postgres_url, keys=ring)
    try:
        yield (lite, *await corpus(lite)), (pg, *await corpus(pg))
    finally:
        await pg.close()
        await lite.close()
        ring.close()


def ranked(hits: list[SearchHit], ids: list[int]) -> list[tuple[str, str, float]]:
    """What the two engines must agree on: each hit's kind, text (message ids differ
    between the two databases: named by their position) and score, in order."""
    return [
        (h.kind, str(ids.index(h.row_id)) if h.kind == "message" else h.text, round(h.score, 9))
        for h in hits
    ]


async def test_both_engines_rank_alice_s_records_alike(
    engines: tuple[tuple[Database, str, list[int]], tuple[Database, str, list[int]]],
) -> None:
    (lite, _, lite_ids), (pg, _, pg_ids) = engines
    assert pg.engine.name == "postgresql" and lite.engine.name == "sqlite"
    found = 0
    for terms in QUERIES:
        query = SearchQuery(ALICE, terms, limit=20, include_facts=True, include_digests=True)
        want = ranked(await SearchIndex(lite).filtered(query), lite_ids)
        got = ranked(await SearchIndex(pg).filtered(query), pg_ids)
        assert got == want, terms
        scores = [score for _, _, score in got]
        assert len(set(scores)) == len(scores), terms  # no ties: the order is the ranking
        found += len(got)
    assert found > 30


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"limit": 2},
        {"include_memories": False},
        {"include_messages": False, "include_facts": True},
        {"include_messages": False, "include_memories": False, "include_digests": True},
        {"include_messages": False, "include_memories": False},
        {"exclude_ids": [1, 2]},
        {"exclude_ids": "many"},
        {"session_id": "own", "before_seq": 4},
        {"in_session": "own", "include_digests": True},
        {"in_session": "elsewhere", "include_digests": True},
        {"since": "later"},
    ],
)
async def test_every_filter_keeps_the_same_records_on_both_engines(
    engines: tuple[tuple[Database, str, list[int]], tuple[Database, str, list[int]]],
    fields: dict[str, object],
) -> None:
    results = []
    for db, sid, ids in engines:
        values = dict(fields)
        if values.get("exclude_ids") == [1, 2]:
            values["exclude_ids"] = [ids[1], ids[2]]
        elif values.get("exclude_ids") == "many":
            values["exclude_ids"] = [ids[0], *range(10**6, 10**6 + 100)]
        for name in ("session_id", "in_session"):
            if values.get(name) == "own":
                values[name] = sid
        if values.get("since") == "later":
            row = await db.fetchone("SELECT created_at FROM messages WHERE id = ?", (ids[5],))
            assert row is not None
            values["since"] = float(row[0])
        query = SearchQuery(ALICE, ["toast", "marmalade", "cream", "grey"], **values)  # type: ignore[arg-type]
        results.append(ranked(await SearchIndex(db).filtered(query), ids))
    assert results[0] == results[1]
    if fields.get("in_session") != "elsewhere" and fields != {
        "include_messages": False,
        "include_memories": False,
    }:
        assert results[0]
