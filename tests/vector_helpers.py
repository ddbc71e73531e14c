"""A small deterministic embedder for storage and ranking tests (the real model has its own).

Each word of a text (lower-cased, letters and digits) adds 1 to the dimension its
sha256 picks; the sum is normalized. Texts that share words are similar, texts that
share none are orthogonal, which is all a storage or fusion test needs. Tests of what
the vectors *mean* use the real all-MiniLM-L6-v2 (tests/llm/test_embeddings.py).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from picobot.errors import LLMError
from picobot.llm.minilm import MiniLM

DIM = 64


def words_vector(text: str) -> npt.NDArray[np.float32]:
    vector = np.zeros(DIM, dtype=np.float32)
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        vector[hashlib.sha256(word.encode()).digest()[0] % DIM] += 1.0
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


class WordsEmbedder:
    """:class:`picobot.llm.embedding.Embedder` of :func:`words_vector`; records its calls."""

    def __init__(self, model_name: str = "words-64") -> None:
        self.model_name = model_name
        self.calls: list[list[str]] = []
        self.fail = False

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(list(texts))
        if self.fail:
            raise LLMError("embeddings endpoint down")
        return np.array([words_vector(t) for t in texts], dtype=np.float32).reshape(len(texts), DIM)

    async def aclose(self) -> None:
        return None


@functools.cache
def shared_minilm() -> MiniLM:
    """The real all-MiniLM-L6-v2, loaded once per test process (about a second)."""
    return MiniLM.load()
