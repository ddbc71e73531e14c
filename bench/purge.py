"""purge: delete a user with 100,000 messages while other users keep chatting.

The victim is built into the working copy first (plain ``sqlite3``, triggers on, texts
sealed with the victim's key). The purge then runs the steps of
``PrivacyController.execute`` one by one, each timed: the key deletion,
``PurgeStore.delete_user`` (batches of 100 rows once the key is gone, one transaction
each) and
``erase_residue`` as a user purge with per-user keys runs it (PASSIVE then TRUNCATE
checkpoint; no index merge, no ``VACUUM``).
Meanwhile ``purge_loops`` other users run turns back to back through ``Kernel.handle``;
their latency during the purge is compared with the same loops' latency without one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.common import BenchContext
from bench.corpus import add_victim, user_id
from bench.provider import InstantProvider
from bench.stats import dist_ms, now_ns, ratio
from picobot.kernel.kernel import Kernel
from picobot.messages import Identity, Inbound, OutboundKind
from picobot.privacy.controller import PrivacyController
from picobot.privacy.scopes import Actor, UserScope
from picobot.runtime import build_kernel, open_database
from picobot.store.db import Database
from picobot.store.erasure.erase import erase_residue
from picobot.store.erasure.purge import PurgeStore


class _Chatter:
    """Other users' turns, back to back, timed."""

    def __init__(self, kernel: Kernel, ctx: BenchContext) -> None:
        self._kernel = kernel
        self._ctx = ctx
        self.errors = 0

    async def loop(self, n: int | None, stop: asyncio.Event | None, out: list[int]) -> None:
        """``n`` turns, or turns until ``stop`` is set."""
        done = 0
        while (n is None or done < n) and not (stop is not None and stop.is_set()):
            u = self._ctx.users(1)[0]
            uid = user_id(u)
            text = self._ctx.gen.texts_for([u])[0]
            start = now_ns()
            async for event in self._kernel.handle(Inbound(Identity("ws", uid, uid), text)):
                if event.kind is OutboundKind.ERROR:
                    self.errors += 1
            out.append(now_ns() - start)
            done += 1


async def _timed_purge(db: Database, victim: str, phases: dict[str, float]) -> int:
    """``PrivacyController.execute`` for a user scope, step by step (without the two
    ``task_runs`` writes that record the purge)."""
    controller = PrivacyController(db)
    actor = Actor("bench-operator", operator=True)
    t = time.perf_counter()
    plan = await controller.plan(UserScope(victim), actor)
    phases["plan_count_s"] = time.perf_counter() - t
    await controller.authorize(plan.scope, actor)
    t = time.perf_counter()
    db.sealer.forget(victim)  # what delete_user does first; timed on its own
    phases["key_delete_s"] = time.perf_counter() - t
    t = time.perf_counter()
    counts = await PurgeStore(db).delete_user(victim)
    phases["delete_rows_s"] = time.perf_counter() - t
    if db.sealer.keyed:  # a key deletion: the residue waits for retention's erasure
        t = time.perf_counter()
        await db.checkpoint_passive()
        phases["checkpoint_passive_s"] = time.perf_counter() - t
    else:
        await erase_residue(db, timings=phases)
    return counts.messages


async def purge_under_load(ctx: BenchContext, victim: str | None = None) -> dict[str, Any]:
    """Purge duration and other users' turn latency with and without it.

    ``victim``: a user already in ``ctx``'s store whose messages were built in beforehand
    (the PostgreSQL stage copies them over); None builds one of ``plan.victim_sessions``
    sessions into the SQLite working copy first.
    """
    plan = ctx.plan
    if victim is None:
        ctx.progress(f"  purge: building the victim ({plan.victim_sessions * 100:,} messages)")
        victim = add_victim(ctx.db_path, plan.victim_sessions, ctx.seed, lambda _m: None)
    settings = ctx.settings()
    async with open_database(settings) as db:
        kernel = build_kernel(settings, db, InstantProvider(ctx.gen.texts(97)))
        chat = _Chatter(kernel, ctx)
        warm: list[int] = []
        await asyncio.gather(*(chat.loop(plan.warmup, None, warm) for _ in range(plan.purge_loops)))
        ctx.progress(f"  purge: {plan.purge_loops} users chatting, no purge")
        quiet: list[int] = []
        await asyncio.gather(
            *(chat.loop(plan.purge_baseline_turns, None, quiet) for _ in range(plan.purge_loops))
        )
        ctx.progress("  purge: the same users chatting while the victim is purged")
        busy: list[int] = []
        stop = asyncio.Event()
        loops = [asyncio.create_task(chat.loop(None, stop, busy)) for _ in range(plan.purge_loops)]
        phases: dict[str, float] = {}
        try:
            deleted = await _timed_purge(db, victim, phases)
        finally:
            stop.set()
            await asyncio.gather(*loops)
    # What the confirmed purge takes (PrivacyController.execute); counting comes before.
    duration = sum(v for k, v in phases.items() if k != "plan_count_s")
    without, during = dist_ms(quiet), dist_ms(busy)
    return {
        "victim_messages": deleted,
        "duration_s": round(duration, 3),
        "phases_s": {k: round(v, 3) for k, v in phases.items()},
        "other_turns_without_purge_ms": without,
        "other_turns_during_purge_ms": during,
        "p99_ratio": ratio(during["p99"], without["p99"]),
        "max_stall_ms": during["max"],
        "concurrent_users": plan.purge_loops,
        "turn_errors": chat.errors,
    }
