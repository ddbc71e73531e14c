"""The ``[embeddings]`` section: the model that turns text into vectors for recall.

With ``provider = "auto"`` (the default) PicoBot runs all-MiniLM-L6-v2 inside the
process when the ``[embed]`` extra is installed (``make run`` installs it) and recalls by
keywords alone when it is not; ``none`` is keywords only, exactly as without this
section. ``local`` requires the in-process model (an error at start without it);
``openai`` asks any OpenAI-compatible ``/v1/embeddings`` endpoint (Ollama, llama.cpp's
server, vLLM, OpenAI). See docs/memory.md#meaning-as-well-as-words.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from picobot.config.sections import EnvName, HttpUrl, Section


class EmbeddingSettings(Section):
    """Sentence embeddings for recall by meaning (see docs/memory.md)."""

    provider: Literal["auto", "none", "local", "openai"] = "auto"
    """auto (local when the [embed] extra is installed, else none), none (lexical recall
    only), local (all-MiniLM-L6-v2 run in-process with numpy; needs the [embed] extra,
    nothing is downloaded at run time) or openai (any OpenAI-compatible /v1/embeddings
    endpoint)."""
    model: str = ""
    """Model name sent to the endpoint (openai); empty = text-embedding-3-small on
    api.openai.com, else the server's first model. Ignored by local."""
    base_url: HttpUrl = "https://api.openai.com/v1"
    """Base URL of the OpenAI-compatible API, e.g. http://127.0.0.1:11434/v1 for Ollama."""
    api_key_env: EnvName = "OPENAI_API_KEY"
    """Name of the environment variable that holds the API key (never the key itself)."""
    timeout_secs: float = Field(default=30.0, gt=0, le=3600)
    """Timeout of one embeddings request (openai), in seconds."""
    max_retries: int = Field(default=3, ge=0, le=10)
    """Retries on HTTP 408/409/429/5xx and connection errors (openai)."""
    query_timeout_ms: int = Field(default=1000, ge=1, le=60_000)
    """Longest a turn waits for its message's vector; past it, that turn's recall is
    lexical only (a slow or unreachable endpoint never holds a reply up for long)."""
    batch_size: int = Field(default=32, ge=1, le=1024)
    """Messages the background indexer embeds per call."""
    candidates: int = Field(default=50, ge=1, le=200)
    """Most similar records fused with the keyword matches per recall."""
    min_similarity: float = Field(default=0.25, ge=-1.0, le=1.0)
    """Records less similar than this (cosine) are not recall candidates by meaning."""
    rrf_k: int = Field(default=60, ge=1, le=1000)
    """Reciprocal rank fusion constant: a record scores weight/(rrf_k + rank) in each list."""
    weight: float = Field(default=1.0, ge=0.0, le=10.0)
    """Weight of the ranking by meaning in the fusion (the keyword ranking, with the
    messages around its matches, weighs 1)."""
    fact_similarity: float = Field(default=0.9, ge=0.0, le=1.0)
    """A newly learned fact at least this similar (cosine) to an active fact of the same user
    and category, naming the same names and numbers, reinforces that fact instead of being
    added: "the user likes green tea" restates "User prefers green tea" (0.93). Lower
    merges more, and wrongly sooner: "has a dog named Rex" and "has a cat named Rex" score
    0.87 with all-MiniLM-L6-v2. 1.0 = off."""
