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
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import BenchContext
from bench.net import child, run_texts, ws_load
from bench.server import KEYED_USERS
from bench.stats import ratio


@dataclass(frozen=True)
class Instance:
    """One ``serve`` process of a capacity bench: its data directory, extra environment
    (a store URL, the master key) and a name for its log file."""

    name: str
    data_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)


async def capacity_runs(
    ctx: BenchContext,
    instances: Sequence[Instance],
    runs: Sequence[tuple[str, Sequence[int]]],
    tag: str,
) -> dict[str, dict[str, Any]]:
    """Start every instance (and one reply sink), then each run in order: closed loops of
    the same number of clients against the instances a run names (indexes into
    ``instances``, clients split evenly), each run on fresh users of its own (so at most
    ``KEYED_USERS // clients`` runs). Returns each run's :func:`ws_load` figures by name.
    """
    plan = ctx.plan
    clients = min(plan.ws_clients, ctx.scale.users, KEYED_USERS // max(2, len(runs)))
    logs = ctx.data_dir
    async with AsyncExitStack() as stack:
        sink = await stack.enter_async_context(child(["sink"], logs / f"{tag}-sink.log"))
        urls = []
        for inst in instances:
            server = await stack.enter_async_context(
                child(
                    ["picobot", str(inst.data_dir), sink["http"]],
                    logs / f"{tag}-{inst.name}.log",
                    env=inst.env,
                )
            )
            urls.append(server["ws"])
        out: dict[str, dict[str, Any]] = {}
        for run, (name, which) in enumerate(runs):
            first = run * clients  # users of its own: histories grow with each run
            ctx.progress(f"  {tag} {name}: {clients} clients x {plan.ws_turns}")
            out[name] = await ws_load(
                [urls[i] for i in which],
                clients,
                plan.ws_turns,
                run_texts(ctx, first, clients),
                picobot=True,
                first_user=first,
            )
            await asyncio.sleep(plan.ws_settle_s)
    return out


async def cluster_capacity(ctx: BenchContext) -> dict[str, Any]:
    """Capacity of one instance, then of two on the same file, in the same run."""
    both = [Instance("a", ctx.data_dir), Instance("b", ctx.data_dir)]
    runs = await capacity_runs(ctx, both, [("one", [0]), ("two", [0, 1])], "cluster")
    return two_against_one(runs["one"], runs["two"])


def two_against_one(one: dict[str, Any], two: dict[str, Any]) -> dict[str, Any]:
    """The cluster figures of a run on one instance and a run on two."""
    return {
        "one_instance_turns_per_s": one["turns_per_s"],
        "two_instances_turns_per_s": two["turns_per_s"],
        "capacity_ratio": ratio(two["turns_per_s"], one["turns_per_s"]),
        "one_instance_p50_ms": one["latency_ms"]["p50"],
        "two_instances_p50_ms": two["latency_ms"]["p50"],
        "error_frames": one["error_frames"] + two["error_frames"],
    }
