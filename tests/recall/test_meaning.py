"""Recall by meaning: the prompt, memory_search and /search fuse keywords with vectors.

The paraphrase tests run the real all-MiniLM-L6-v2; the others use the words embedder
of tests/vector_helpers.py, whose similarities are predictable.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from picobot.access.context import ToolContext
from picobot.config.embeddings import EmbeddingSettings
from picobot.config.settings import MemorySettings
from picobot.kernel.prompt import PromptRequest
from picobot.kernel.prompt.retriever import MemoryRetriever
from picobot.llm.base import ChatMessage
from picobot.llm.embed_local import LocalEmbedder
from picobot.recall.meaning import VectorRecall
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.retrieval.recall import (
    RecallQuery,
    fuse_vectors,
    keyword_matches,
    recall_records,
)
from picobot.store.retrieval.search import SearchIndex
from picobot.tasks.vector_index import VectorIndexer
from picobot.text.tokens import CharTokenEstimator
from picobot.tools.memory_search import ranked
from tests.kernel.test_memory_prompt import recalled_block
from tests.vector_helpers import WordsEmbedder, shared_minilm

EST = CharTokenEstimator()
ALICE, BOB = "tui:alice", "tui:bob"


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "c.db")
    yield database
    await database.close()


class Chat:
    """Sessions, messages and both indexes, as the runtime's tasks keep them."""

    def __init__(self, db: Database, embedder: object, **settings: object) -> None:
        self.db = db
        self.embedder = embedder
        self.messages = MessageRepo(db)
        self.sessions = SessionRepo(db)
        self.meaning = VectorRecall(embedder, EmbeddingSettings(**settings))  # type: ignore[arg-type]
        self.retriever = MemoryRetriever(
            db=db, estimator=EST, settings=MemorySettings(), vectors=self.meaning
        )

    async def say(self, user: str, *texts: str) -> str:
        sid = await self.sessions.create("tui", user, user)
        for i, text in enumerate(texts):
            await self.messages.append(sid, "user" if i % 2 == 0 else "assistant", text, 5)
        await SearchIndex(self.db).index_pending()
        await VectorIndexer(self.db, self.embedder).run_until_done()  # type: ignore[arg-type]
        return sid

    async def ask(self, text: str, user: str = ALICE) -> list[ChatMessage]:
        sid = await self.sessions.create("tui", user, user)
        current = await self.messages.append(sid, "user", text, 5)
        context = ToolContext(user_id=user, session_id=sid)
        return await self.retriever.build(PromptRequest(context, sid, "sys", current))


DENTIST = ("My dentist is Doctor Quokkaberg", "Good to know, I will remember that")
NOISE = (
    "We went hiking in the mountains last weekend",
    "That sounds like a lovely trip",
    "I bought a new laptop for work",
    "Which model did you pick?",
)


async def test_a_paraphrase_recalls_what_no_keyword_finds(db: Database) -> None:
    embedder = LocalEmbedder(model=shared_minilm())
    try:
        chat = Chat(db, embedder)
        await chat.say(ALICE, *DENTIST, *NOISE)
        await chat.say(BOB, "My dentist is Doctor Wombatstein", "Noted")
        question = "Who takes care of my teeth?"
        assert "Quokkaberg" in recalled_block(await chat.ask(question))
        # Keywords alone: no word of the question is in the answer.
        chat.retriever.vectors = None
        assert "Quokkaberg" not in str(await chat.ask(question))
        # Another user's vectors are never compared.
        chat.retriever.vectors = chat.meaning
        assert "Wombatstein" not in str(await chat.ask(question))
    finally:
        await embedder.aclose()


async def test_search_and_memory_search_rank_by_meaning_too(db: Database) -> None:
    embedder = LocalEmbedder(model=shared_minilm())
    try:
        chat = Chat(db, embedder)
        await chat.say(ALICE, *NOISE, *DENTIST)
        index = SearchIndex(db)
        text = "doctor for my teeth"
        hits = await ranked(index, ALICE, ["doctor", "teeth"], 3, meaning=chat.meaning, text=text)
        assert hits[0].text == DENTIST[0]
        keyword_only = await ranked(index, ALICE, ["laptop"], 3)
        assert keyword_only[0].text == NOISE[2]
    finally:
        await embedder.aclose()


async def test_fusion_ranks_a_record_found_both_ways_first(db: Database) -> None:
    embedder = WordsEmbedder()
    chat = Chat(db, embedder)
    await chat.say(
        ALICE,
        "green tea every morning",
        "ok",
        "morning runs by the river",
        "nice",
        "green tea and green tea again",
    )
    query = RecallQuery(ALICE, ["green", "tea", "morning"], neighbours=0)
    vectors = await chat.meaning.query("green tea every morning")
    assert vectors is not None
    fused = await db.read(lambda c: recall_records(c, query, vectors))
    assert fused[0].text == "green tea every morning"
    # The turn's two reads (matches, then the fusion) rank exactly as one read does.
    for neighbours in (0, 2):
        q = RecallQuery(ALICE, ["green", "morning"], neighbours=neighbours)
        matches = await db.read(lambda c, q=q: keyword_matches(c, q))
        two = await db.read(lambda c, q=q, m=matches: fuse_vectors(c, q, m, vectors))
        one = await db.read(lambda c, q=q: recall_records(c, q, vectors))
        assert two == one
    # No vector: exactly the keyword ranking.
    plain = await db.read(lambda c: recall_records(c, query))
    assert plain == await db.read(lambda c: fuse_vectors(c, query, keyword_matches(c, query), None))


async def test_a_failing_embedder_leaves_keyword_recall(db: Database) -> None:
    embedder = WordsEmbedder()
    chat = Chat(db, embedder)
    await chat.say(ALICE, "my kayak is red", "nice")
    embedder.fail = True
    assert "kayak is red" in recalled_block(await chat.ask("what colour is my kayak?"))


class Stuck:
    """An embedder whose answer never comes (a hung endpoint)."""

    model_name = "stuck"

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        await self.release.wait()
        return np.zeros((len(texts), 4), dtype=np.float32)

    async def aclose(self) -> None:
        self.release.set()


async def test_a_hung_embedder_costs_a_turn_at_most_its_timeout(db: Database) -> None:
    chat = Chat(db, WordsEmbedder(), query_timeout_ms=20)
    await chat.say(ALICE, "my kayak is red", "nice")
    stuck = Stuck()
    chat.meaning.embedder = stuck
    try:
        prompt = await asyncio.wait_for(chat.ask("what colour is my kayak?"), timeout=30)
    finally:
        await stuck.aclose()
    assert "kayak is red" in recalled_block(prompt)


async def test_the_indexer_stores_a_turns_vector_instead_of_embedding_again(
    db: Database,
) -> None:
    embedder = WordsEmbedder()
    chat = Chat(db, embedder)
    await chat.say(ALICE, "my kayak is red", "nice")
    embedder.calls.clear()
    await chat.ask("what colour is my kayak?")
    assert embedder.calls == [["what colour is my kayak?"]]  # the turn's own embedding
    assert len(chat.meaning.recent) == 1
    indexer = VectorIndexer(db, embedder, recent=chat.meaning.recent)
    assert await indexer.run_until_done() == 1
    assert embedder.calls == [["what colour is my kayak?"]]  # not embedded again
    assert len(chat.meaning.recent) == 0


async def test_a_purged_messages_kept_vector_is_dropped_by_the_indexer(db: Database) -> None:
    embedder = WordsEmbedder()
    chat = Chat(db, embedder)
    await chat.say(ALICE, "my kayak is red", "nice")
    await chat.ask("what colour is my kayak?")
    await db.write(lambda c: c.execute("DELETE FROM messages WHERE content LIKE 'what colour%'"))
    indexer = VectorIndexer(db, embedder, recent=chat.meaning.recent)
    assert await indexer.run_until_done() == 0
    assert len(chat.meaning.recent) == 0  # the scan passed its id: forgotten


async def test_fusion_keeps_the_keyword_ranking_with_its_neighbours(db: Database) -> None:
    """With nothing found by meaning, the fused ranking is the keyword one, neighbours
    in their places (regression: fusing before adding the neighbours scored them on the
    flat reciprocal-rank scale, below every match, and lost single-hop answers)."""
    embedder = WordsEmbedder()
    chat = Chat(db, embedder)
    filler = " ".join(f"word{i}" for i in range(60))
    await chat.say(
        ALICE,
        "kayak canoe kayak canoe",
        "by the old boathouse near the pier",
        *[f"{filler} kayak {i}" if i % 2 == 0 else f"reply number {i} here" for i in range(8)],
    )
    query = RecallQuery(ALICE, ["kayak", "canoe"])
    vectors = await chat.meaning.query("kayak canoe")
    assert vectors is not None
    none_near = replace(vectors, min_similarity=1.5)
    keyword = await db.read(lambda c: recall_records(c, query))
    fused = await db.read(lambda c: recall_records(c, query, none_near))
    texts = [h.text for h in keyword]
    # The strong match's neighbour outranks the weak matches: the case that broke.
    assert texts.index("by the old boathouse near the pier") < texts.index(f"{filler} kayak 6")
    assert [h.text for h in fused] == texts
