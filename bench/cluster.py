"""cluster: WebSocket capacity of two ``serve`` instances on one data directory against one.

Two PicoBot servers (``bench.server picobot``) run in processes of their own on the
bench's working copy: the same SQLite file, as two instances behind a load balancer on
one machine would (docs/deploy.md). In the same run, with the same clients and fresh
users for each run, closed loops measure the capacity of instance A alone and then of
A and B with the clients split evenly between them (each user stays on one instance).
The figure is the second over the first. On a machine whose cores already run one
server, its clients and its database work, a second instance adds contention for the
cores and for SQLite's single writer (across processes a waiting writer sleeps and
polls), not capacity.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench.common import BenchContext
from bench.net import child, run_texts, ws_load
from bench.server import KEYED_USERS
from bench.stats import ratio


async def cluster_capacity(ctx: BenchContext) -> dict[str, Any]:
    """Capacity of one instance, then of two on the same file, in the same run."""
    plan = ctx.plan
    clients = min(plan.ws_clients, ctx.scale.users, KEYED_USERS // 2)
    logs = ctx.data_dir
    async with (
        child(["sink"], logs / "cluster-sink.log") as sink,
        child(["picobot", str(ctx.data_dir), sink["http"]], logs / "cluster-a.log") as a,
        child(["picobot", str(ctx.data_dir), sink["http"]], logs / "cluster-b.log") as b,
    ):
        runs: dict[str, dict[str, Any]] = {}
        for run, (name, urls) in enumerate((("one", [a["ws"]]), ("two", [a["ws"], b["ws"]]))):
            first = run * clients  # users of its own: histories grow with each run
            ctx.progress(f"  cluster {name} instance(s): {clients} clients x {plan.ws_turns}")
            runs[name] = await ws_load(
                urls,
                clients,
                plan.ws_turns,
                run_texts(ctx, first, clients),
                picobot=True,
                first_user=first,
            )
            await asyncio.sleep(plan.ws_settle_s)
    one, two = runs["one"], runs["two"]
    return {
        "one_instance_turns_per_s": one["turns_per_s"],
        "two_instances_turns_per_s": two["turns_per_s"],
        "capacity_ratio": ratio(two["turns_per_s"], one["turns_per_s"]),
        "one_instance_p50_ms": one["latency_ms"]["p50"],
        "two_instances_p50_ms": two["latency_ms"]["p50"],
        "error_frames": one["error_frames"] + two["error_frames"],
    }
