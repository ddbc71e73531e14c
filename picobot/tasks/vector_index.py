"""The background indexer of message vectors (recall by meaning).

Every ``INDEX_INTERVAL_SECS`` the runtime runs :meth:`VectorIndexer.run`: it reads the
messages that have content and no vector of the configured model yet, embeds them in
batches of ``[embeddings] batch_size`` and stores the vectors
(:mod:`picobot.store.vectors`). A turn never waits for it: the turn embeds only its own
message. The scan starts at the oldest message when the process starts (so a model
turned on later, or changed, covers the whole history) and then follows new messages.
A failing endpoint pauses the indexer with a growing delay (up to a minute) and is
logged once per streak, not every half second.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial

from picobot.errors import LLMError
from picobot.llm.embedding import MAX_TEXT_CHARS, Embedder, EmbedderBusy
from picobot.store.db import Database
from picobot.store.vectors import pack, store_vectors, unembedded

log = logging.getLogger(__name__)

MAX_BATCHES_PER_RUN = 16
"""Batches one run embeds before it yields to the next interval."""
MAX_PAUSE_SECS = 60.0


class VectorIndexer:
    """Embeds stored messages in the background; see the module docstring."""

    def __init__(
        self,
        db: Database,
        embedder: Embedder,
        *,
        batch_size: int = 16,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._embedder = embedder
        self._batch = batch_size
        self._clock = clock
        self._cursor = 0
        self._failures = 0
        self._paused_until = 0.0

    async def run(self, max_batches: int = MAX_BATCHES_PER_RUN) -> int:
        """Embed and store up to ``max_batches`` batches; how many vectors were stored."""
        if self._clock() < self._paused_until:
            return 0
        model = self._embedder.model_name
        stored = 0
        for _ in range(max_batches):
            found = await self._db.read(
                partial(unembedded, model=model, after_id=self._cursor, limit=self._batch)
            )
            if found.rows:
                try:
                    vectors = await self._embedder.embed(
                        [t[:MAX_TEXT_CHARS] for _, t in found.rows]
                    )
                except EmbedderBusy:
                    return stored  # turns come first; the same rows next run
                except LLMError as exc:
                    self._pause(exc)
                    return stored
                rows = [(mid, pack(v)) for (mid, _), v in zip(found.rows, vectors, strict=True)]
                stored += int(await self._db.write(partial(store_vectors, model=model, rows=rows)))
            self._cursor = found.cursor
            self._failures = 0
            if found.done:
                break
        return stored

    async def run_until_done(self) -> int:
        """Embed everything not embedded yet (tests, the recall evaluation)."""
        total = 0
        while True:
            before = self._cursor
            total += await self.run()
            if self._cursor == before:
                return total

    def _pause(self, exc: LLMError) -> None:
        self._failures += 1
        pause = min(MAX_PAUSE_SECS, 2.0 ** (self._failures - 1))
        self._paused_until = self._clock() + pause
        if self._failures == 1:
            log.warning("message vectors: embedding failed (%s); retrying with backoff", exc)
