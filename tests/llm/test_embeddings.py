"""Embedding providers: the registry, the OpenAI-compatible endpoint, the local model.

The endpoint tests run against a real aiohttp server on loopback speaking the
``/v1/embeddings`` wire format; the local tests run the real all-MiniLM-L6-v2.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
from typing import get_args

import numpy as np
import pytest

from picobot.config.embeddings import EmbeddingSettings
from picobot.errors import ConfigError, LLMError
from picobot.llm.embed_local import LocalEmbedder
from picobot.llm.embed_openai import OpenAIEmbedder
from picobot.llm.embedding import EMBEDDERS, EmbedderBusy, build_embedder, local_model_installed
from picobot.llm.minilm import MiniLM
from tests.llm.conftest import FakeLLMServer


def test_the_config_choices_are_auto_none_and_the_registered_embedders() -> None:
    choices = get_args(EmbeddingSettings.model_fields["provider"].annotation)
    assert sorted(choices) == sorted(["auto", "none", *EMBEDDERS.names()])


def test_none_builds_nothing() -> None:
    assert build_embedder(EmbeddingSettings(provider="none")) is None


async def test_auto_is_the_default_and_runs_the_local_model_when_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PICOBOT_EMBEDDINGS__PROVIDER")
    assert EmbeddingSettings().provider == "auto"
    assert local_model_installed()  # the test environment has the [embed] extra
    embedder = build_embedder(EmbeddingSettings())
    assert embedder is not None
    try:
        assert embedder.model_name == "all-MiniLM-L6-v2"
    finally:
        await embedder.aclose()


def test_auto_without_the_extra_is_keyword_recall(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def without_model(name: str, *args: object) -> object:
        return None if name == "all_minilm_l6_v2" else real(name)

    monkeypatch.setattr(importlib.util, "find_spec", without_model)
    assert not local_model_installed()
    assert build_embedder(EmbeddingSettings(provider="auto")) is None


def _reply(*vectors: list[float], reverse: bool = False) -> dict[str, object]:
    rows = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    if reverse:
        rows.reverse()
    return {"object": "list", "data": rows, "model": "m", "usage": {"prompt_tokens": 3}}


def _settings(url: str, **kw: object) -> EmbeddingSettings:
    return EmbeddingSettings(provider="openai", base_url=url, model="nomic-embed-text", **kw)


async def test_openai_posts_the_texts_and_returns_unit_vectors_in_input_order(
    llm_server: FakeLLMServer,
) -> None:
    llm_server.reply(llm_server.json_reply(_reply([3.0, 4.0], [0.0, 2.0], reverse=True)))
    embedder = OpenAIEmbedder(_settings(llm_server.base_url), api_key="sk-test")
    try:
        vectors = await embedder.embed(["first", "second"])
    finally:
        await embedder.aclose()
    assert vectors.dtype == np.float32
    assert np.allclose(vectors, [[0.6, 0.8], [0.0, 1.0]])
    (request,) = llm_server.requests
    assert request.path.endswith("/embeddings")
    assert request.body == {
        "model": "nomic-embed-text",
        "input": ["first", "second"],
        "encoding_format": "float",
    }
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert embedder.model_name == "nomic-embed-text"


async def test_openai_retries_a_server_error(llm_server: FakeLLMServer) -> None:
    llm_server.reply(
        llm_server.json_reply({"error": {"message": "loading"}}, status=503),
        llm_server.json_reply(_reply([1.0, 0.0])),
    )
    embedder = OpenAIEmbedder(_settings(llm_server.base_url), backoff_base=0.001)
    try:
        vectors = await embedder.embed(["x"])
    finally:
        await embedder.aclose()
    assert vectors.shape == (1, 2)
    assert len(llm_server.requests) == 2
    assert "Authorization" not in llm_server.requests[0].headers


@pytest.mark.parametrize(
    "reply",
    [
        {"data": [{"index": 0, "embedding": [1.0]}]},  # one row for two texts
        {"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]},
        {"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [1.0, 2.0]}]},
        {"data": [{"index": 0, "embedding": "no"}, {"index": 1, "embedding": [1.0]}]},
        {"error": "nope"},
    ],
)
async def test_openai_a_reply_of_the_wrong_shape_is_an_llm_error(
    llm_server: FakeLLMServer, reply: dict[str, object]
) -> None:
    llm_server.reply(llm_server.json_reply(reply))
    embedder = OpenAIEmbedder(_settings(llm_server.base_url, max_retries=0), api_key="sk-secret")
    try:
        with pytest.raises(LLMError) as caught:
            await embedder.embed(["a", "b"])
    finally:
        await embedder.aclose()
    assert "sk-secret" not in str(caught.value)


def test_openai_needs_a_model_name_except_on_openai() -> None:
    with pytest.raises(ConfigError, match=r"embeddings\.model"):
        OpenAIEmbedder(EmbeddingSettings(provider="openai", base_url="http://127.0.0.1:1/v1"))
    assert OpenAIEmbedder(EmbeddingSettings(provider="openai")).model_name == (
        "text-embedding-3-small"
    )


def test_openai_on_api_openai_com_needs_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PICOBOT_TEST_EMBED_KEY", raising=False)
    settings = EmbeddingSettings(provider="openai", api_key_env="PICOBOT_TEST_EMBED_KEY")
    with pytest.raises(ConfigError, match="PICOBOT_TEST_EMBED_KEY"):
        build_embedder(settings)


# --- the local model ------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> MiniLM:
    return MiniLM.load()


def test_local_model_gives_sentence_transformers_similarities(minilm: MiniLM) -> None:
    # The sentence-transformers documentation's example for all-MiniLM-L6-v2.
    v = minilm.encode(
        ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    )
    sims = v @ v.T
    assert sims[0, 1] == pytest.approx(0.6660, abs=2e-3)
    assert sims[0, 2] == pytest.approx(0.1046, abs=2e-3)
    assert sims[1, 2] == pytest.approx(0.1411, abs=2e-3)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)


def test_local_batches_give_the_vectors_of_single_texts(minilm: MiniLM) -> None:
    texts = ["short", "a somewhat longer sentence about green tea and mountains", "", "é ü 漢字"]
    batch = minilm.encode(texts, batch=3)
    for i, text in enumerate(texts):
        assert np.allclose(batch[i], minilm.encode([text])[0], atol=1e-5)


def test_local_cuts_long_texts_at_the_model_limit(minilm: MiniLM) -> None:
    long = "word " * 2000
    assert minilm.tokens(long) == 256
    assert math.isfinite(float(minilm.encode([long]).sum()))


async def test_local_embedder_runs_off_the_loop_and_refuses_past_its_queue(minilm: MiniLM) -> None:
    embedder = LocalEmbedder(model=minilm, max_waiting=1)
    try:
        first = await embedder.embed(["hello"])
        assert first.shape == (1, 384)
        # Two at once with room for one waiting: the second is refused, not queued.
        results = await asyncio.gather(
            embedder.embed(["one"]), embedder.embed(["two"]), return_exceptions=True
        )
        assert isinstance(results[0], np.ndarray)
        assert isinstance(results[1], EmbedderBusy)
    finally:
        await embedder.aclose()
