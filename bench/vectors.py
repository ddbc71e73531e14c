"""vectors: what recall by meaning costs ([embeddings] provider = "local").

Three figures of their own, each against the same work with embeddings off, measured
alternately (which side first alternating) so drift hits both alike:

- **embedding one message** with the default model (all-MiniLM-L6-v2 in numpy, one
  BLAS thread), p50/p95, the way a turn embeds its message;
- **recall with vectors**: ``recall_records`` fused with the nearest messages, vs the
  same keyword recall alone. ``VECTOR_USERS`` corpus users get a vector for every
  message first (random unit vectors: embedding a million messages would take the
  bench a day, and what recall reads and ranks is the same bytes); the fusion keeps
  every candidate (``min_similarity`` -1), the most work it can do;
- **a turn with embeddings on**: ``Kernel.handle`` with the embedder (the message
  embedded while the keyword read runs, then fused) vs the same turns without.
"""

from __future__ import annotations

import random
import sqlite3
from functools import partial
from typing import Any

import numpy as np

from bench.common import BenchContext
from bench.corpus import user_id
from bench.provider import InstantProvider
from bench.stats import Ticker, dist_ms, now_ns, ratio
from bench.turn import kernel_turn
from picobot.llm.embed_local import LocalEmbedder
from picobot.llm.minilm import DIM, MODEL_NAME
from picobot.messages import Identity, Inbound
from picobot.recall.keywords import extract_terms
from picobot.runtime import build_kernel, open_database
from picobot.store.retrieval.recall import RecallQuery, VectorQuery, recall_records
from picobot.store.retrieval.vectors import VECTOR_DTYPE

VECTOR_USERS = 40
EMBED_ITERS = 200
TURN_ITERS = 200


def seed_vectors(db_path: Any, users: list[int], seed: int) -> int:
    """A random unit vector for every user or assistant message of ``users``."""
    rng = np.random.default_rng(seed)
    conn = sqlite3.connect(db_path)
    try:
        ids = [
            int(r[0])
            for u in users
            for r in conn.execute(
                "SELECT m.id FROM sessions s JOIN messages m ON m.session_id = s.id"
                " WHERE s.user_id = ? AND m.role IN ('user', 'assistant')",
                (user_id(u),),
            )
        ]
        vectors = rng.standard_normal((len(ids), DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        with conn:
            conn.executemany(
                "INSERT OR REPLACE INTO message_vectors (message_id, model, vector)"
                " VALUES (?, ?, ?)",
                (
                    (mid, MODEL_NAME, v.astype(VECTOR_DTYPE).tobytes())
                    for mid, v in zip(ids, vectors, strict=True)
                ),
            )
    finally:
        conn.close()
    return len(ids)


async def vector_costs(ctx: BenchContext) -> dict[str, Any]:
    """The three figures of the module docstring."""
    plan = ctx.plan
    rng = random.Random(ctx.seed + 31)
    chosen = rng.sample(range(ctx.scale.users), min(VECTOR_USERS, ctx.scale.users))
    stored = seed_vectors(ctx.db_path, chosen, ctx.seed)
    ctx.progress(f"vectors: {stored:,} vectors for {len(chosen)} users")
    embedder = LocalEmbedder()
    try:
        embedding, queries = await _embedding(ctx, embedder, chosen)
        recall = await _recall(ctx, chosen, queries)
        turn = await _turns(ctx, embedder, chosen, rng)
    finally:
        await embedder.aclose()
    return {
        "model": MODEL_NAME,
        "vectors_stored": stored,
        "vector_users": len(chosen),
        "embedding_ms": embedding,
        **recall,
        **turn,
        "warmup": plan.warmup,
    }


async def _embedding(
    ctx: BenchContext, embedder: LocalEmbedder, users: list[int]
) -> tuple[dict[str, Any], list[np.ndarray]]:
    warm = max(5, ctx.plan.warmup // 5)
    iters = min(EMBED_ITERS, ctx.plan.recall_iters)
    texts = ctx.gen.texts_for([users[i % len(users)] for i in range(warm + iters)])
    samples: list[int] = []
    vectors = []
    tick = Ticker("vectors: embedding", len(texts), ctx.progress)
    for i, text in enumerate(texts):
        started = now_ns()
        vectors.append((await embedder.embed([text]))[0])
        if i >= warm:
            samples.append(now_ns() - started)
        tick.step(i + 1)
    return dist_ms(samples), vectors


async def _recall(ctx: BenchContext, users: list[int], vectors: list[np.ndarray]) -> dict[str, Any]:
    plan = ctx.plan
    total = plan.warmup + plan.recall_iters
    texts = ctx.gen.texts_for([users[i % len(users)] for i in range(total)])
    max_terms = ctx.settings().session.memory.recall_max_terms
    samples: dict[bool, list[int]] = {True: [], False: []}
    tick = Ticker("vectors: recall", total, ctx.progress)
    async with open_database(ctx.settings()) as db:
        for i in range(total):
            query = RecallQuery(user_id(users[i % len(users)]), extract_terms(texts[i], max_terms))
            fused = VectorQuery(MODEL_NAME, vectors[i % len(vectors)], min_similarity=-1.0)
            for on in (True, False) if i % 2 == 0 else (False, True):
                started = now_ns()
                await db.read(partial(recall_records, query=query, vectors=fused if on else None))
                if i >= plan.warmup:
                    samples[on].append(now_ns() - started)
            tick.step(i + 1)
    on, off = dist_ms(samples[True]), dist_ms(samples[False])
    return {
        "recall_ms": on,
        "recall_keywords_ms": off,
        "recall_p50_ratio": ratio(on["p50"], off["p50"]),
        "recall_p95_ratio": ratio(on["p95"], off["p95"]),
        "recall_p95_ms": on["p95"],
    }


async def _turns(
    ctx: BenchContext, embedder: LocalEmbedder, users: list[int], rng: random.Random
) -> dict[str, Any]:
    measured = [rng.choice(users) for _ in range(min(TURN_ITERS, ctx.plan.turn_iters))]
    warm = list(dict.fromkeys(measured))
    order = warm + measured
    texts = ctx.gen.texts_for(order)
    replies = ctx.gen.texts(97)
    settings = ctx.settings()
    samples: dict[bool, list[int]] = {True: [], False: []}
    tick = Ticker("vectors: turns", len(order), ctx.progress)
    async with open_database(settings) as db:
        kernels = {
            True: build_kernel(settings, db, InstantProvider(replies), embedder=embedder),
            False: build_kernel(settings, db, InstantProvider(replies)),
        }
        for i, u in enumerate(order):
            uid = user_id(u)
            for on in (True, False) if i % 2 == 0 else (False, True):
                inbound = Inbound(Identity("ws", uid, uid), texts[i])
                started = now_ns()
                await kernel_turn(kernels[on], inbound)
                if i >= len(warm):
                    samples[on].append(now_ns() - started)
            tick.step(i + 1)
    on, off = dist_ms(samples[True]), dist_ms(samples[False])
    return {
        "turn_ms": on,
        "turn_keywords_ms": off,
        "turn_p50_ratio": ratio(on["p50"], off["p50"]),
        "turn_p95_ratio": ratio(on["p95"], off["p95"]),
    }
