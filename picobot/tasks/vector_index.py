"""The background indexer of message vectors (recall by meaning).

Every ``INDEX_INTERVAL_SECS`` the runtime runs :meth:`VectorIndexer.run`: it reads the
messages that have content and no vector of the configured model yet, embeds them in
batches of ``[embeddings] batch_size`` and stores the vectors
(:mod:`picobot.store.retrieval.vectors`). A turn never waits for it: the turn embeds only its own
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
from typing import TYPE_CHECKING

from picobot.errors import LLMError
from picobot.llm.embedding import MAX_TEXT_CHARS, Embedder, EmbedderBusy
from picobot.store.conversation.messages import existing_ids
from picobot.store.db import Database
from picobot.store.retrieval.vectors import RecentVectors, pack, store_vectors, unembedded

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

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
        recent: RecentVectors | None = None,
    ) -> None:
        self._db = db
        self._embedder = embedder
        self._batch = batch_size
        self._clock = clock
        self._cursor = 0
        self._failures = 0
        self._paused_until = 0.0
        # Vectors turns computed already (picobot.recall.meaning), stored as they are.
        self._recent = recent if recent is not None else RecentVectors()

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
                known = {mid: self._recent.take(mid) for mid, _ in found.rows}
                todo = [(mid, text) for mid, text in found.rows if known[mid] is None]
                try:
                    if todo:
                        fresh = await self._embedder.embed([t[:MAX_TEXT_CHARS] for _, t in todo])
                        known.update((mid, v) for (mid, _), v in zip(todo, fresh, strict=True))
                except EmbedderBusy:
                    self._keep(known)
                    return stored  # turns come first; the same rows next run
                except LLMError as exc:
                    self._keep(known)
                    self._pause(exc)
                    return stored
                rows = [(mid, pack(v)) for mid, v in known.items() if v is not None]
                stored += int(await self._db.write(partial(store_vectors, model=model, rows=rows)))
            self._cursor = found.cursor
            self._recent.drop_through(found.cursor)
            self._failures = 0
            if found.done:
                await self.forget_gone()
                break
        return stored

    async def forget_gone(self) -> None:
        """Drop kept vectors whose messages are gone (purged after their turn, by any
        process): after each scan that caught up, and when a purge is seen."""
        held = self._recent.ids()
        if held:
            alive = await self._db.read(lambda conn: existing_ids(conn, held))
            for mid in set(held) - set(alive):
                self._recent.take(mid)

    async def run_until_done(self) -> int:
        """Embed everything not embedded yet (tests, the recall evaluation)."""
        total = 0
        while True:
            before = self._cursor
            total += await self.run()
            if self._cursor == before:
                return total

    def _keep(self, known: dict[int, npt.NDArray[np.float32] | None]) -> None:
        for mid, vector in known.items():
            if vector is not None:
                self._recent.put(mid, vector)

    def _pause(self, exc: LLMError) -> None:
        self._failures += 1
        pause = min(MAX_PAUSE_SECS, 2.0 ** (self._failures - 1))
        self._paused_until = self._clock() + pause
        if self._failures == 1:
            log.warning("message vectors: embedding failed (%s); retrying with backoff", exc)
