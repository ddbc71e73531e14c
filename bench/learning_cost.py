"""learning_overhead: what learned facts, reflections and digests add to a turn.

The same corpus users chat through two kernels on the same working copy, one with
``[memory.learning]`` on (the default) and one with it off, alternating iteration by
iteration (and which of the two goes first), so drift hits both alike. Before the run
every measured user gets ``FACTS_PER_USER`` learned facts and ``REFLECTIONS_PER_USER``
session reflections folded into one period digest, so the learning side builds the
learned-facts block and recalls reflections and digests as a user with a long history
would. The model is the instant one: the figure is PicoBot's own work.
"""

from __future__ import annotations

import sqlite3
import time
from functools import partial
from typing import Any

from bench.common import BenchContext
from bench.corpus import user_id
from bench.provider import InstantProvider
from bench.stats import Ticker, dist_ms, now_ns
from bench.turn import kernel_turn
from picobot.kernel.kernel import Kernel
from picobot.messages import Identity, Inbound
from picobot.runtime import build_kernel, open_database
from picobot.store.db import Database
from picobot.store.learned.digests import DigestStore, Provenance, unfolded
from picobot.store.learned.fact_rules import CATEGORIES, lifecycle_rules, observation
from picobot.store.learned.fact_writes import FactStore

FACTS_PER_USER = 50
REFLECTIONS_PER_USER = 10


async def learning_overhead(ctx: BenchContext) -> dict[str, Any]:
    """Turn time with learning on over the same turns with learning off (p50, p95)."""
    plan = ctx.plan
    measured = ctx.users(plan.turn_iters)
    warm = list(dict.fromkeys(measured))
    users = warm + measured
    texts = ctx.gen.texts_for(users)
    replies = ctx.gen.texts(97)
    on_settings = ctx.settings()
    off_settings = ctx.settings(memory={"learning": {"enabled": False}})
    samples: dict[bool, list[int]] = {True: [], False: []}
    tick = Ticker("learning_overhead", len(users), ctx.progress)
    async with open_database(on_settings) as db:
        await _seed(ctx, db, warm, on_settings.memory.learning)
        kernels = {
            True: build_kernel(on_settings, db, InstantProvider(replies)),
            False: build_kernel(off_settings, db, InstantProvider(replies)),
        }
        for i, u in enumerate(users):
            uid = user_id(u)
            for learning in (True, False) if i % 2 == 0 else (False, True):
                took = await _timed(kernels[learning], Inbound(Identity("ws", uid, uid), texts[i]))
                if i >= len(warm):
                    samples[learning].append(took)
            tick.step(i + 1)
    on, off = dist_ms(samples[True]), dist_ms(samples[False])
    return {
        "picobot_ms": on,
        "raw_ms": off,
        "p50_ratio": round(on["p50"] / off["p50"], 3),
        "p95_ratio": round(on["p95"] / off["p95"], 3),
        "facts_per_user": FACTS_PER_USER,
        "reflections_per_user": REFLECTIONS_PER_USER,
    }


async def _timed(kernel: Kernel, inbound: Inbound) -> int:
    started = now_ns()
    await kernel_turn(kernel, inbound)
    return now_ns() - started


async def _seed(ctx: BenchContext, db: Database, users: list[int], learning: Any) -> None:
    """Facts, reflections and a period digest for each of ``users``."""
    facts = FactStore(db, rules=lifecycle_rules(learning))
    digests = DigestStore(db)
    words = ctx.gen.texts(FACTS_PER_USER + REFLECTIONS_PER_USER, 8, 30)
    now = time.time()
    for u in users:
        uid = user_id(u)
        for j in range(FACTS_PER_USER):
            text = words[j]
            found = observation(text.split()[0], CATEGORIES[j % len(CATEGORIES)], text)
            await facts.create(uid, found, confidence=None, actor="bench", now=now)
        for j, span in enumerate(_sessions(ctx, uid)[:REFLECTIONS_PER_USER]):
            text = words[FACTS_PER_USER + j]
            await digests.add_reflection(uid, span, text, len(text) // 4, now=now)
        sources = await db.read(partial(unfolded, user_id=uid, level=0, limit=REFLECTIONS_PER_USER))
        if len(sources) >= 2:
            text = " ".join(words[FACTS_PER_USER:])
            await digests.add_digest(uid, 1, sources, text, len(text) // 4, now=now)


def _sessions(ctx: BenchContext, uid: str) -> list[Provenance]:
    """``REFLECTIONS_PER_USER`` message ranges of ``uid``'s sessions: each session cut
    into equal parts (the corpus gives a user 1 to 10 sessions of 100 messages)."""
    conn = sqlite3.connect(ctx.db_path)
    try:
        rows = conn.execute(
            "SELECT m.session_id, m.id, m.seq_order FROM messages m"
            " JOIN sessions s ON s.id = m.session_id WHERE s.user_id = ?"
            " ORDER BY m.session_id, m.seq_order",
            (uid,),
        ).fetchall()
    finally:
        conn.close()
    by_session: dict[str, list[tuple[int, int]]] = {}
    for sid, mid, seq in rows:
        by_session.setdefault(str(sid), []).append((int(mid), int(seq)))
    parts = -(-REFLECTIONS_PER_USER // max(1, len(by_session)))
    spans = []
    for sid, messages in by_session.items():
        size = max(1, -(-len(messages) // parts))
        for k in range(0, len(messages), size):
            chunk = messages[k : k + size]
            spans.append(Provenance(sid, chunk[0][0], chunk[-1][0], chunk[0][1], chunk[-1][1]))
    return spans[:REFLECTIONS_PER_USER]
