"""The embedding provider protocol, the providers by name (``[embeddings] provider``).

An :class:`Embedder` turns texts into unit-length float32 vectors (one row each), so
cosine similarity is a dot product. Adding a provider is its module plus one
``@EMBEDDERS.register`` line here (imported only when chosen: numpy and the local
model cost nothing while embeddings are off) and its name in the ``provider`` choices
of :class:`picobot.config.embeddings.EmbeddingSettings` (a test keeps them equal).
Failures are :class:`picobot.errors.LLMError`; :class:`EmbedderBusy` when a bounded
queue is full (the caller goes on without a vector).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from picobot.config.embeddings import EmbeddingSettings
from picobot.errors import ConfigError, LLMError
from picobot.registry import Registry

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]
    """Rows of unit-length float32 vectors, one per text."""

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 4000
"""Text embedded of one message: the local model reads 256 tokens anyway, and endpoints
refuse inputs past their window (8191 tokens for OpenAI's)."""


class EmbedderBusy(LLMError):
    """Too many embeddings are waiting already; the caller goes on without this one."""


class Embedder(Protocol):
    """Texts in, unit-length vectors out (``len(texts)`` rows of ``dim`` floats)."""

    @property
    def model_name(self) -> str:
        """What is stored beside each vector: vectors of another model are not compared."""
        ...

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """The vectors of ``texts``, in order; LLMError (or EmbedderBusy) on failure."""
        ...

    async def aclose(self) -> None:
        """Release what the embedder holds (threads, HTTP sessions)."""
        ...


def _single_threaded_blas() -> None:
    # Before numpy is first imported (it reads these once): OpenBLAS with two threads
    # on two busy cores is 15 times slower than with one (minilm.one_blas_thread,
    # which also covers a numpy imported earlier). An operator's own value wins.
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(name, "1")


EmbedderFactory = Callable[[EmbeddingSettings], Embedder]
"""Builds an embedder from ``[embeddings]``."""

EMBEDDERS: Registry[EmbedderFactory] = Registry("embedding provider", "[embeddings] provider")


def require_numpy() -> None:
    """ConfigError naming the extra when numpy is missing (vectors are compared with it)."""
    _single_threaded_blas()
    try:
        import numpy  # noqa: F401
    except ImportError:
        raise ConfigError(
            "[embeddings] needs numpy: install PicoBot with the embed extra"
            " (pip install 'picobot-kernel[embed]')"
        ) from None


@EMBEDDERS.register("local")
def _local(settings: EmbeddingSettings) -> Embedder:
    require_numpy()
    from picobot.llm.embed_local import LocalEmbedder

    return LocalEmbedder()


@EMBEDDERS.register("openai")
def _openai(settings: EmbeddingSettings) -> Embedder:
    require_numpy()
    from picobot.llm.embed_openai import OpenAIEmbedder

    return OpenAIEmbedder.from_settings(settings)


def local_model_installed() -> bool:
    """Whether the in-process model can run: numpy, tokenizers and the model's package
    are importable (located without importing them)."""
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("numpy", "tokenizers", "all_minilm_l6_v2")
    )


def build_embedder(settings: EmbeddingSettings) -> Embedder | None:
    """The configured embedder, or None for lexical recall only: ``provider = "none"``,
    or ``"auto"`` without the ``[embed]`` extra (said once in the log)."""
    provider = settings.provider
    if provider == "auto":
        if not local_model_installed():
            log.info(
                "recall by meaning is off: the [embed] extra is not installed"
                " (pip install 'picobot-kernel[embed]'; docs/memory.md)"
            )
            return None
        provider = "local"
    if provider == "none":
        return None
    return EMBEDDERS.get(provider)(settings)
    return EMBEDDERS.get(settings.provider)(settings)
