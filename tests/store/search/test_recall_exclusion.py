"""Leaving the prompt's own messages out of recall: by id (the retriever) or by session."""

from __future__ import annotations

import time

import pytest

from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.retrieval import search
from picobot.store.retrieval.search import SearchIndex, SearchQuery, search_records

ALICE = "telegram:1001"
BOB = "slack:T1:U2"


async def chat(db: Database, user: str, texts: list[str]) -> tuple[str, list[int]]:
    sid = await SessionRepo(db).create("test", "chat-" + user, user)
    ids = [(await MessageRepo(db).append(sid, "user", t, 3)).id for t in texts]
    await SearchIndex(db).index_pending()
    return sid, ids


async def recall(db: Database, query: SearchQuery) -> set[tuple[str, int]]:
    hits = await db.read(lambda conn: search_records(conn, query))
    return {(h.kind, h.row_id) for h in hits}


async def test_excluded_ids_leave_out_those_messages_and_nothing_else(db: Database) -> None:
    sid, ids = await chat(db, ALICE, [f"lighthouse note {n}" for n in range(1, 6)])
    _, older = await chat(db, ALICE, ["lighthouse in the old session"])
    _, bobs = await chat(db, BOB, ["bob's lighthouse"])
    now = time.time()
    memory = await db.write(
        lambda conn: conn.execute(
            "INSERT INTO user_memories (user_id, key, content, created_at, updated_at)"
            " VALUES (?1, picobot_seal(?1, ?2), picobot_seal(?1, ?3), ?4, ?4) RETURNING id",
            (ALICE, "place", "the lighthouse at Cape Point", now),
        ).fetchone()[0]
    )
    await SearchIndex(db).index_pending()  # PostgreSQL queues notes too
    by_id = await recall(db, SearchQuery(ALICE, ["lighthouse"], exclude_ids=ids[2:]))
    assert by_id == {
        ("message", ids[0]),
        ("message", ids[1]),
        ("message", older[0]),
        ("memory", memory),
    }
    # The same rows as leaving out the session's messages from the third on.
    by_session = await recall(db, SearchQuery(ALICE, ["lighthouse"], session_id=sid, before_seq=3))
    assert by_session == by_id
    assert ("message", bobs[0]) not in by_id
    # An id of another user's message changes nothing; none excluded finds all six.
    assert await recall(db, SearchQuery(ALICE, ["lighthouse"], exclude_ids=bobs)) == {
        *by_id,
        ("message", ids[2]),
        ("message", ids[3]),
        ("message", ids[4]),
    }


@pytest.mark.parametrize("as_parameters", [0, 1000])
async def test_any_number_of_ids_can_be_excluded(
    db: Database, monkeypatch: pytest.MonkeyPatch, as_parameters: int
) -> None:
    # 0: every list goes in as JSON; 1000: as statement parameters.
    monkeypatch.setattr(search, "EXCLUDED_AS_PARAMETERS", as_parameters)
    _, ids = await chat(db, ALICE, [f"zeppelin flight {n}" for n in range(80)])
    query = SearchQuery(ALICE, ["zeppelin"], limit=10, exclude_ids=ids[:75])
    assert await recall(db, query) == {("message", i) for i in ids[75:]}
    sql, _ = search.search_sql(query)
    assert ("json_each" in sql) == (as_parameters == 0)
