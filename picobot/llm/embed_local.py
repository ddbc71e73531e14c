"""The offline embedder: all-MiniLM-L6-v2 (:mod:`picobot.llm.minilm`) off the event loop.

One worker thread runs the model, so embedding never blocks the event loop and never
takes more than one core's worth of Python work from the turns; numpy releases the
GIL inside its matrix products. The model is loaded on first use (about a second,
90 MB), in that thread. At most ``max_waiting`` calls may wait for the thread: past
that a call fails at once with :class:`EmbedderBusy`, so a burst of turns goes on
with lexical recall instead of queueing behind the model (recall never costs
capacity).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

from picobot.errors import LLMError
from picobot.llm.embedding import EmbedderBusy
from picobot.llm.minilm import MODEL_NAME, MiniLM, model_zip

if TYPE_CHECKING:
    from picobot.llm.embedding import Vectors

MAX_WAITING = 8
"""Calls that may wait for the model thread at once (turns and the indexer)."""
CHUNK = 4
"""Texts one job of the model thread embeds: a long call (the indexer's batch) goes in
jobs of this many, so a turn's message waits behind one job (tens of milliseconds per
text), not behind the whole batch."""


class LocalEmbedder:
    """all-MiniLM-L6-v2 in a thread of its own; see the module docstring."""

    def __init__(self, *, max_waiting: int = MAX_WAITING, model: MiniLM | None = None) -> None:
        if model is None:
            model_zip()  # a missing extra is a ConfigError at start, not at the first turn
        self._model = model
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="picobot-embed")
        self._max_waiting = max_waiting
        self._waiting = 0

    @property
    def model_name(self) -> str:
        """``all-MiniLM-L6-v2``."""
        return MODEL_NAME

    def _loaded(self) -> MiniLM:
        with self._lock:
            if self._model is None:
                self._model = MiniLM.load()
            return self._model

    def _encode(self, texts: list[str]) -> Vectors:
        return self._loaded().encode(texts)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """The vectors of ``texts``, computed in the model thread."""
        if self._waiting >= self._max_waiting:
            raise EmbedderBusy("the local embedding model is busy")
        self._waiting += 1
        try:
            loop = asyncio.get_running_loop()
            parts = [
                await loop.run_in_executor(self._pool, self._encode, list(texts[i : i + CHUNK]))
                for i in range(0, len(texts), CHUNK)
            ]
            if not parts:
                return await loop.run_in_executor(self._pool, self._encode, [])
            return parts[0] if len(parts) == 1 else np.concatenate(parts)
        except (LLMError, asyncio.CancelledError):
            raise
        except Exception as exc:  # a broken wheel or a numpy failure: the caller's LLMError
            raise LLMError(f"local embedding failed: {type(exc).__name__}") from exc
        finally:
            self._waiting -= 1

    async def aclose(self) -> None:
        """Stop the model thread (a running embedding finishes first)."""
        await asyncio.to_thread(self._pool.shutdown, wait=True, cancel_futures=True)
