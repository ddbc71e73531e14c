"""A fact said again in other words reinforces the fact (the real all-MiniLM-L6-v2)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from picobot.llm.embed_local import LocalEmbedder
from picobot.store.db import Database
from picobot.store.learned.fact_paraphrase import FactParaphrases
from picobot.store.learned.fact_rules import Observation, is_paraphrase
from picobot.store.learned.fact_writes import FactStore
from picobot.store.learned.facts import active_facts, fact_sources
from tests.vector_helpers import WordsEmbedder, shared_minilm

USER = "tui:alice"
T0 = 1_700_000_000.0


@pytest.fixture
async def embedder() -> AsyncIterator[LocalEmbedder]:
    local = LocalEmbedder(model=shared_minilm())
    yield local
    await local.aclose()


async def observe_both(store: FactStore, first: Observation, second: Observation) -> list[str]:
    await store.observe(USER, [first], session_id=None, message_id=1, now=T0)
    [applied] = await store.observe(USER, [second], session_id=None, message_id=2, now=T0 + 60)
    return [applied.outcome]


def obs(text: str, category: str = "preference", subject: str | None = None) -> Observation:
    return Observation(subject, category, text)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("User prefers green tea", "The user likes green tea"),
        ("Sister is called Anna", "Has a sister named Anna"),
        ("Plans to visit Japan in May", "Is going to travel to Japan in May"),
    ],
)
async def test_a_paraphrase_reinforces_the_fact(
    db: Database, embedder: LocalEmbedder, first: str, second: str
) -> None:
    store = FactStore(db, paraphrases=FactParaphrases(embedder.embed))
    assert await observe_both(store, obs(first), obs(second)) == ["reinforced"]
    [fact] = await db.read(lambda c: active_facts(c, USER, 0.0, 10))
    assert fact.text == first
    assert fact.confidence == pytest.approx(0.8)  # 0.7, then one more observation
    assert [s.message_id for s in await db.read(lambda c: fact_sources(c, fact.id))] == [1, 2]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Has a dog named Rex", "Has a cat named Rex"),  # 0.87 similar: under the threshold
        ("Plans to visit Japan in May", "Plans to visit Japan in June"),  # names differ
        ("User prefers green tea", "User likes coffee"),
    ],
)
async def test_different_facts_stay_apart(
    db: Database, embedder: LocalEmbedder, first: str, second: str
) -> None:
    store = FactStore(db, paraphrases=FactParaphrases(embedder.embed))
    assert await observe_both(store, obs(first), obs(second)) == ["created"]
    assert len(await db.read(lambda c: active_facts(c, USER, 0.0, 10))) == 2


async def test_a_paraphrase_in_another_category_is_another_fact(
    db: Database, embedder: LocalEmbedder
) -> None:
    store = FactStore(db, paraphrases=FactParaphrases(embedder.embed))
    first, second = obs("User prefers green tea"), obs("The user likes green tea", "knowledge")
    assert await observe_both(store, first, second) == ["created"]


async def test_without_an_embedding_model_only_the_same_words_reinforce(db: Database) -> None:
    store = FactStore(db)
    assert await observe_both(
        store, obs("User prefers green tea"), obs("The user likes green tea")
    ) == ["created"]
    assert await observe_both(store, obs("x likes tea"), obs("X likes tea!")) == ["reinforced"]


async def test_a_failing_embedder_adds_the_fact_as_before(db: Database) -> None:
    failing = WordsEmbedder()
    failing.fail = True
    store = FactStore(db, paraphrases=FactParaphrases(failing.embed))
    first, second = obs("User prefers green tea"), obs("The user likes green tea")
    assert await observe_both(store, first, second) == ["created"]


def test_names_and_numbers_must_agree() -> None:
    assert is_paraphrase("Sister is Anna", "Has a sister named Anna", 0.95, 0.9)
    assert not is_paraphrase("Sister is Anna", "Sister is Hanna", 0.95, 0.9)
    assert not is_paraphrase("Ran 5 km", "Ran 10 km", 0.99, 0.9)
    assert not is_paraphrase("Likes tea", "Enjoys tea", 0.89, 0.9)
