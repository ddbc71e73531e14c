"""Message vectors: written by the background indexer, read per user, gone with their message."""

from __future__ import annotations

import base64
import io
import json

import numpy as np

from picobot.llm.embed_local import LocalEmbedder
from picobot.privacy.export import export_user
from picobot.store.db import Database
from picobot.store.erasure.purge import PurgeStore
from picobot.store.retrieval.vectors import (
    nearest_messages,
    store_vectors,
    unembedded,
    unpack,
    vector_count,
)
from picobot.tasks.vector_index import VectorIndexer
from tests.privacy.test_purge_store import add_message, add_session
from tests.vector_helpers import WordsEmbedder, shared_minilm, words_vector


async def _chat(db: Database, user: str, sid: str, texts: list[str]) -> None:
    await add_session(db, user, sid)
    for i, text in enumerate(texts):
        await add_message(db, sid, text, role="user" if i % 2 == 0 else "assistant")


async def _ids(db: Database, sid: str) -> list[int]:
    rows = await db.fetchall("SELECT id FROM messages WHERE session_id = ? ORDER BY id", (sid,))
    return [int(r[0]) for r in rows]


async def test_the_indexer_embeds_messages_with_content_once(db: Database) -> None:
    await _chat(db, "u1", "s1", ["green tea in the morning", "ok", "hiking in the alps"])
    await add_message(db, "s1", "tool output about tea", role="tool")
    embedder = WordsEmbedder()
    indexer = VectorIndexer(db, embedder, batch_size=2)
    assert await indexer.run_until_done() == 2
    # "ok" has no word worth a vector; tool output is never recalled.
    assert sorted(t for call in embedder.calls for t in call) == [
        "green tea in the morning",
        "hiking in the alps",
    ]
    assert await indexer.run_until_done() == 0  # nothing left, nothing embedded again
    await add_message(db, "s1", "a new message about tea")
    assert await indexer.run() == 1
    assert await db.read(vector_count) == 3


async def test_nearest_is_the_users_own_messages_of_the_model(db: Database) -> None:
    await _chat(db, "alice", "a", ["green tea please", "coffee is fine"])
    await _chat(db, "bob", "b", ["green tea please"])
    await VectorIndexer(db, WordsEmbedder()).run_until_done()
    query = words_vector("green tea")
    alice = await db.read(lambda c: nearest_messages(c, "alice", "words-64", query, limit=5))
    a_ids = await _ids(db, "a")
    assert [mid for mid, _ in alice] == a_ids  # tea first, then coffee
    assert alice[0][1] > alice[1][1]
    assert await db.read(lambda c: nearest_messages(c, "alice", "other", query, limit=5)) == []
    # exclusions and the similarity floor
    left = await db.read(
        lambda c: nearest_messages(c, "alice", "words-64", query, limit=5, exclude_ids=a_ids[:1])
    )
    assert [mid for mid, _ in left] == a_ids[1:]
    floor = await db.read(
        lambda c: nearest_messages(c, "alice", "words-64", query, limit=5, min_similarity=0.5)
    )
    assert [mid for mid, _ in floor] == a_ids[:1]
    # A session handed to another user takes its vectors along.
    await db.write(lambda c: c.execute("UPDATE sessions SET user_id = 'carol' WHERE id = 'a'"))
    assert await db.read(lambda c: nearest_messages(c, "alice", "words-64", query, limit=5)) == []
    carol = await db.read(lambda c: nearest_messages(c, "carol", "words-64", query, limit=5))
    assert len(carol) == 2


async def test_an_edited_message_loses_its_vector_and_a_deleted_one_gets_none(
    db: Database,
) -> None:
    await _chat(db, "u1", "s1", ["green tea please", "coffee is fine"])
    await VectorIndexer(db, WordsEmbedder()).run_until_done()
    first, second = await _ids(db, "s1")
    await db.write(
        lambda c: c.execute("UPDATE messages SET content = 'milk' WHERE id = ?", (first,))
    )
    assert await db.read(vector_count) == 1
    # Read for embedding, then purged before the write: nothing is stored for it.
    found = await db.read(lambda c: unembedded(c, "words-64", 0, 10))
    assert [mid for mid, _ in found.rows] == [first]
    await db.write(lambda c: c.execute("DELETE FROM messages WHERE id = ?", (first,)))
    blob = words_vector("milk").astype("<f2").tobytes()
    assert await db.write(lambda c: store_vectors(c, "words-64", [(first, blob)])) == 0
    assert await db.read(vector_count) == 1  # the second message's
    assert second not in [mid for mid, _ in found.rows]


async def test_a_failing_endpoint_pauses_the_indexer(db: Database) -> None:
    await _chat(db, "u1", "s1", ["green tea please"])
    now = [100.0]
    embedder = WordsEmbedder()
    embedder.fail = True
    indexer = VectorIndexer(db, embedder, clock=lambda: now[0])
    assert await indexer.run() == 0
    assert await indexer.run() == 0
    assert len(embedder.calls) == 1  # paused: the second run did not call
    embedder.fail = False
    now[0] += 2
    assert await indexer.run() == 1


async def test_a_purge_counts_and_deletes_the_vectors(db: Database) -> None:
    await _chat(db, "u1", "s1", ["green tea please", "coffee is fine"])
    await _chat(db, "u1", "s2", ["hiking in the alps"])
    await VectorIndexer(db, WordsEmbedder()).run_until_done()
    store = PurgeStore(db)
    planned = await store.count_session("s1")
    done = await store.delete_session("s1")
    # two FTS entries or queued ids plus two vectors
    assert planned.index_entries == done.index_entries == 4
    assert await db.read(vector_count) == 1
    await store.delete_user("u1")
    assert await db.read(vector_count) == 0


async def test_an_export_holds_each_messages_vector(db: Database) -> None:
    await _chat(db, "u1", "s1", ["green tea please", "ok"])
    await VectorIndexer(db, WordsEmbedder()).run_until_done()
    out = io.StringIO()
    await export_user(db, "u1", out)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    messages = [r for r in records if r["type"] == "message"]
    assert [("embedding" in m) for m in messages] == [True, False]
    embedding = messages[0]["embedding"]
    assert embedding["model"] == "words-64"
    vector = unpack(base64.b64decode(embedding["vector"]))
    assert np.allclose(vector, words_vector("green tea please"), atol=1e-3)


async def test_the_local_model_finds_a_paraphrase_no_word_of_which_matches(
    db: Database,
) -> None:
    await _chat(
        db,
        "u1",
        "s1",
        [
            "My dentist is Doctor Quokkaberg",
            "We went hiking in the mountains last weekend",
            "I bought a new laptop for work",
        ],
    )
    embedder = LocalEmbedder(model=shared_minilm())
    try:
        await VectorIndexer(db, embedder).run_until_done()
        (query,) = await embedder.embed(["Who looks after my teeth?"])
    finally:
        await embedder.aclose()
    best = await db.read(lambda c: nearest_messages(c, "u1", "all-MiniLM-L6-v2", query, limit=3))
    assert best[0][0] == (await _ids(db, "s1"))[0]
