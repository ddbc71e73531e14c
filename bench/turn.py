"""turn_overhead and recall_search: PicoBot's read path against the same SQL, raw.

Both alternate PicoBot and the raw baseline iteration by iteration (and which of the
two goes first), on the same working copy of the corpus, so drift in the machine,
the page cache or the WAL affects both sides alike.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from bench.common import BenchContext
from bench.corpus import user_id
from bench.provider import InstantProvider
from bench.raw import CURRENT, LAST, RawStore, RawTurn
from bench.stats import Paired, Ticker, dist_ms, now_ns
from picobot.kernel.kernel import Kernel
from picobot.messages import Identity, Inbound, OutboundKind
from picobot.recall.keywords import extract_terms
from picobot.runtime import build_kernel, open_database
from picobot.store.retrieval.recall import RecallQuery, recall_records


async def turn_overhead(ctx: BenchContext, raw: RawStore | None = None) -> dict[str, Any]:
    """A whole turn through ``Kernel.handle`` (zero-latency model) vs its raw statements.

    PicoBot's side: commit the user message (checking the chat's session in the same
    write), build the prompt (memories, summary, recall, 20-message window, token
    budget), stream the reply from an instant model, commit the reply. Raw side: the
    same SELECTs and write transactions on one plain connection, with the recall terms
    precomputed: ``raw`` (closed on return), by default a sqlite3 connection to the
    working copy. PicoBot's side runs on ``ctx.settings()``'s store (PostgreSQL when
    ``ctx.store_url`` is set), so pass ``RawStore.postgres`` for that case.
    """
    plan = ctx.plan
    measured = ctx.users(plan.turn_iters)
    # The figure is a chat's steady-state turn: each measured user has one (paired,
    # unrecorded) turn first. A chat's first turn after a start does one read more,
    # its session lookup (the kernel remembers the session after that).
    warm = list(dict.fromkeys(measured))
    users = warm + measured
    total = len(users)
    texts = ctx.gen.texts_for(users)
    replies = ctx.gen.texts(97)
    settings = ctx.settings()
    max_terms = settings.session.memory.recall_max_terms
    raw = raw if raw is not None else RawStore(ctx.db_path)
    pairs = Paired(len(warm))
    recalled = 0
    tick = Ticker("turn_overhead", total, ctx.progress)
    try:
        async with open_database(settings) as db:
            kernel = build_kernel(settings, db, InstantProvider(replies))
            for i in range(total):
                uid = user_id(users[i])
                inbound = Inbound(Identity("ws", uid, uid), texts[i])
                raw_turn = RawTurn(
                    uid,
                    texts[i],
                    replies[i % len(replies)],
                    extract_terms(texts[i], max_terms),
                    time.time(),
                )
                _, hits = await pairs.measure(
                    i, partial(kernel_turn, kernel, inbound), partial(raw.turn, raw_turn)
                )
                recalled += hits
                tick.step(i + 1)
    finally:
        raw.close()
    return {**pairs.summary(), "recall_hits_per_turn": round(recalled / total, 2)}


async def recall_search(ctx: BenchContext) -> dict[str, Any]:
    """``recall_records`` in a ``Database.read``, as the retriever runs it, vs the same
    function on a plain connection in the bench's thread (the same statements, raw).

    Each query is the keyword set of a fresh message (``extract_terms``, up to 8 terms)
    for a random user, scoped to that user, leaving out the current session's window.
    """
    plan = ctx.plan
    total = plan.warmup + plan.recall_iters
    max_terms = ctx.settings().session.memory.recall_max_terms
    users = ctx.users(total)
    texts = ctx.gen.texts_for(users)
    raw = RawStore(ctx.db_path)
    pairs = Paired(plan.warmup)
    hits = n_terms = 0
    tick = Ticker("recall_search", total, ctx.progress)
    try:
        where = _windows(raw, users)
        async with open_database(ctx.settings()) as db:
            for i in range(total):
                terms = extract_terms(texts[i], max_terms)
                n_terms += len(terms)
                if not terms:
                    continue
                query = _recall_query(users[i], where, terms)
                found, _ = await pairs.measure(
                    i,
                    partial(db.read, partial(recall_records, query=query)),
                    partial(raw.recall, query),
                )
                hits += len(found)
                tick.step(i + 1)
    finally:
        raw.close()
    return {
        **pairs.summary(),
        "hits_per_query": round(hits / max(1, total), 2),
        "terms_per_query": round(n_terms / max(1, total), 2),
    }


def _windows(raw: RawStore, users: list[int]) -> dict[int, list[int]]:
    """Per user: the message ids of the 20-message window of the current session."""
    where: dict[int, list[int]] = {}
    for u in set(users):
        uid = user_id(u)
        sid = raw.query(CURRENT, ("ws", uid, uid))[0][0]
        where[u] = [int(row[0]) for row in raw.query(LAST, (sid, 20))]
    return where


def _recall_query(u: int, where: dict[int, list[int]], terms: list[str]) -> RecallQuery:
    """The retriever's recall query for user ``u``: outside the current window."""
    return RecallQuery(user_id(u), terms, exclude_ids=where[u])


async def recall_scaling(small: BenchContext, large: BenchContext) -> dict[str, Any]:
    """Recall p95 on the larger corpus over the smaller one, measured side by side.

    The per-size recall benches run minutes apart, and this VM's speed drifts on that
    scale (the same code gave 2.97x and 3.50x). Here each query (same user, same terms)
    runs on both corpora in turn, which one first alternating, so drift hits both.
    """
    plan = small.plan
    total = plan.warmup + plan.recall_iters
    max_terms = small.settings().session.memory.recall_max_terms
    shared_users = min(small.scale.users, large.scale.users)
    users = [small.rng.randrange(shared_users) for _ in range(total)]
    texts = small.gen.texts_for(users)
    wheres = []
    for ctx in (small, large):
        raw = RawStore(ctx.db_path)
        try:
            wheres.append(_windows(raw, users))
        finally:
            raw.close()
    samples: tuple[list[int], list[int]] = ([], [])
    tick = Ticker("recall_scaling", total, small.progress)
    async with (
        open_database(small.settings()) as small_db,
        open_database(large.settings()) as large_db,
    ):
        dbs = (small_db, large_db)
        for i in range(total):
            terms = extract_terms(texts[i], max_terms)
            for side in ((0, 1) if i % 2 == 0 else (1, 0)) if terms else ():
                query = _recall_query(users[i], wheres[side], terms)
                started = now_ns()
                await dbs[side].read(partial(recall_records, query=query))
                if i >= plan.warmup:
                    samples[side].append(now_ns() - started)
            tick.step(i + 1)
    small_ms, large_ms = dist_ms(samples[0]), dist_ms(samples[1])
    return {
        "scales": [small.scale.name, large.scale.name],
        "small_ms": small_ms,
        "large_ms": large_ms,
        "p95_ratio": round(large_ms["p95"] / small_ms["p95"], 3),
    }


async def kernel_turn(kernel: Kernel, inbound: Inbound) -> None:
    async for event in kernel.handle(inbound):
        if event.kind is OutboundKind.ERROR:
            raise RuntimeError(f"turn failed: {event.text}")
