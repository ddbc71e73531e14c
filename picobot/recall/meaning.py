"""Recall by meaning: the current message's vector, for the prompt and for searches.

The retriever (:mod:`picobot.kernel.prompt.retriever`) calls :meth:`VectorRecall.start`
before its keyword read, so the message is embedded (in the embedder's thread or on
its server) while the read runs, then fuses the two in a second short read
(:func:`picobot.store.retrieval.recall.fuse_vectors`). ``memory_search`` and ``/search`` call
:meth:`VectorRecall.query` and rank with the same function. A message whose vector is
not ready within ``[embeddings] query_timeout_ms``, an embedder that is busy or
failing: that recall is keyword-only, never an error for the user.
"""

from __future__ import annotations

import asyncio
import logging
import time

from picobot.config.embeddings import EmbeddingSettings
from picobot.errors import LLMError
from picobot.llm.embedding import MAX_TEXT_CHARS, Embedder, EmbedderBusy
from picobot.store.retrieval.recall import VectorQuery
from picobot.store.retrieval.vectors import RecentVectors

log = logging.getLogger(__name__)

FAILURE_LOG_SECS = 60.0
"""A failing embedder is logged at most once a minute (every turn would log it)."""


class VectorRecall:
    """Embeds messages for recall; see the module docstring."""

    def __init__(self, embedder: Embedder, settings: EmbeddingSettings) -> None:
        self.embedder = embedder
        self._cfg = settings
        self._logged_at = -FAILURE_LOG_SECS
        self.recent = RecentVectors()
        """Turns' message vectors, for the indexer to store instead of embedding again."""

    def start(self, text: str, message_id: int | None = None) -> asyncio.Task[VectorQuery | None]:
        """Begin embedding ``text``; the task's result is None if it failed or timed out.

        With ``message_id`` (``text`` being that stored message's whole content), the
        vector is kept for the background indexer.
        """
        return asyncio.ensure_future(self.query(text, message_id))

    async def query(self, text: str, message_id: int | None = None) -> VectorQuery | None:
        """The vector side of a recall for ``text``, or None (keyword recall only)."""
        cfg = self._cfg
        try:
            async with asyncio.timeout(cfg.query_timeout_ms / 1000):
                vectors = await self.embedder.embed([text[:MAX_TEXT_CHARS]])
        except EmbedderBusy:
            return None
        except (LLMError, TimeoutError) as exc:
            now = time.monotonic()
            if now - self._logged_at >= FAILURE_LOG_SECS:
                self._logged_at = now
                reason = "timed out" if isinstance(exc, TimeoutError) else str(exc)
                log.warning("recall by meaning skipped: embedding the message %s", reason)
            return None
        if message_id is not None:
            self.recent.put(message_id, vectors[0])
        return VectorQuery(
            self.embedder.model_name,
            vectors[0],
            candidates=cfg.candidates,
            min_similarity=cfg.min_similarity,
            rrf_k=cfg.rrf_k,
            weight=cfg.weight,
        )
