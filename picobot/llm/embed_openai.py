"""Embeddings from any OpenAI-compatible ``POST /v1/embeddings`` endpoint.

OpenAI itself, Ollama, llama.cpp's ``llama-server --embeddings``, vLLM, LM Studio all
answer ``{"model": ..., "input": [texts]}`` with ``{"data": [{"index": i,
"embedding": [floats]}, ...]}``. Retries, timeouts and key scrubbing are the chat
provider's (:class:`picobot.llm.http.HTTPTransport`). Vectors are normalized here:
not every server returns unit-length ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import aiohttp
import numpy as np

from picobot.config.embeddings import EmbeddingSettings
from picobot.config.sources import read_secret
from picobot.errors import ConfigError
from picobot.llm.http import HTTPTransport, url_host
from picobot.llm.retry import RetryPolicy

if TYPE_CHECKING:
    from picobot.llm.embedding import Vectors

OPENAI_HOST = "api.openai.com"
DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
"""Model asked of api.openai.com when ``[embeddings] model`` is empty."""
MAX_INPUTS = 256
"""Texts per request (OpenAI accepts 2048; local servers prefer fewer)."""


def parse_embeddings(data: Any, count: int) -> Vectors:
    """The unit-length vectors of a ``/embeddings`` reply, in input order.

    A reply of the wrong shape (a missing row, rows of different lengths, a non-number)
    raises KeyError or TypeError, which the transport turns into an LLMError.
    """
    rows = data["data"]
    if not isinstance(rows, list) or len(rows) != count:
        raise TypeError(f"expected {count} embeddings, got {len(rows)}")
    ordered = sorted(rows, key=lambda r: int(r["index"]))
    if [int(r["index"]) for r in ordered] != list(range(count)):
        raise TypeError("embedding indexes do not match the inputs")
    try:
        vectors = np.array([r["embedding"] for r in ordered], dtype=np.float32)
    except ValueError as exc:  # rows of different lengths, strings
        raise TypeError("embeddings are not rows of numbers of one length") from exc
    if vectors.ndim != 2 or vectors.shape[1] == 0 or not np.isfinite(vectors).all():
        raise TypeError("embeddings are not rows of numbers of one length")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit: Vectors = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
    return unit


class OpenAIEmbedder:
    """``/embeddings`` over aiohttp; ``api_key`` is sent as a Bearer token when set."""

    def __init__(
        self,
        settings: EmbeddingSettings,
        *,
        api_key: str | None = None,
        session: aiohttp.ClientSession | None = None,
        backoff_base: float = 0.5,
        max_backoff: float = 20.0,
    ) -> None:
        self._base_url = settings.base_url.rstrip("/")
        self._model = settings.model or (
            DEFAULT_OPENAI_MODEL if url_host(self._base_url) == OPENAI_HOST else ""
        )
        if not self._model:
            # The name is stored beside every vector, so it must not depend on a guess.
            raise ConfigError(
                f"embeddings.model: name the embedding model {self._base_url} serves"
                " (e.g. nomic-embed-text for Ollama)"
            )
        self._api_key = api_key or None
        self._http = HTTPTransport(
            "openai embeddings",
            timeout_secs=settings.timeout_secs,
            policy=RetryPolicy(settings.max_retries, backoff_base, max_backoff),
            session=session,
            secrets=[api_key] if api_key else [],
        )

    @classmethod
    def from_settings(cls, settings: EmbeddingSettings) -> OpenAIEmbedder:
        """Build from settings, reading the key from ``settings.api_key_env``.

        api.openai.com always needs a key (a ConfigError naming the variable); local
        servers usually do not.
        """
        key = read_secret(settings.api_key_env) if settings.api_key_env else ""
        if not key and url_host(settings.base_url) == OPENAI_HOST:
            raise ConfigError(
                f"embeddings.api_key_env: the environment variable {settings.api_key_env}"
                f" is not set; {settings.base_url} needs an API key"
            )
        return cls(settings, api_key=key or None)

    @property
    def model_name(self) -> str:
        """The configured model (stored beside each vector)."""
        return self._model

    @property
    def endpoint(self) -> str:
        """The URL requests are POSTed to."""
        return f"{self._base_url}/embeddings"

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """The vectors of ``texts``, ``MAX_INPUTS`` a request."""
        parts = []
        for start in range(0, len(texts), MAX_INPUTS):
            chunk = list(texts[start : start + MAX_INPUTS])
            body = {"model": self._model, "input": chunk, "encoding_format": "float"}
            parts.append(
                await self._http.post_json(
                    self.endpoint,
                    self._headers(),
                    body,
                    partial(parse_embeddings, count=len(chunk)),
                )
            )
        if not parts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.concatenate(parts).astype(np.float32)

    async def aclose(self) -> None:
        """Close the HTTP session if this embedder created it."""
        await self._http.aclose()
