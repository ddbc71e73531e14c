"""``python -m bench``: generate (or reuse) the corpora, run every bench, write the results.

``BENCH_SCALE=small`` runs the 100k-message corpus only (under a minute once the
corpus is cached); the default (``full``) runs 100k and 1M. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import sqlite3
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import prompt_cache, report
from bench.chat_endpoint import chat_endpoint_overhead
from bench.cluster import cluster_capacity
from bench.common import SMOKE, STANDARD, BenchContext, Plan, Progress, make_progress
from bench.corpus import SCALES, TINY, Scale, ensure_corpus, work_copy
from bench.learning_cost import learning_overhead
from bench.mcp_search import mcp_search
from bench.net import network
from bench.postgres import postgres_benches
from bench.purge import purge_under_load
from bench.turn import recall_scaling, recall_search, turn_overhead
from bench.vectors import vector_costs
from bench.write import write_latency

HERE = Path(__file__).resolve().parent
# learning_overhead: it adds facts and reflections the other benches should not see;
# vectors: it stores vectors for some users; postgres last, on a fresh copy of the corpus
# (skipped without a PostgreSQL server).
BENCHES = (
    "recall_search",
    "turn_overhead",
    "write",
    "network",
    "cluster",
    "chat_endpoint",
    "purge",
    "mcp_search",
    "learning_overhead",
    "vectors",
    "postgres",
)


@dataclass(frozen=True, slots=True)
class RunConfig:
    """What one run measures and where it writes."""

    scales: Sequence[Scale]
    plan: Plan = STANDARD
    seed: int = 7
    cache_dir: Path = HERE / ".cache"
    out_dir: Path = HERE / "results"
    chart: bool = True
    profile: bool = False
    """Run the PicoBot server under cProfile; the profile lands next to the results."""
    only: tuple[str, ...] = ()
    """These benches alone (in :data:`BENCHES` order), without the recall scaling and
    prompt-cache runs; the results go to ``latest-<names>.json`` and ``.md``."""

    @property
    def benches(self) -> tuple[str, ...]:
        """The benches this run measures, in order."""
        return tuple(b for b in BENCHES if b in self.only) if self.only else BENCHES


def run_scale(cfg: RunConfig, scale: Scale, progress: Progress) -> dict[str, Any]:
    """Every bench on one corpus size, each on the same working copy, in order."""
    corpus = ensure_corpus(cfg.cache_dir, scale, cfg.seed, progress)
    db_path = work_copy(corpus, cfg.cache_dir / f"run-{scale.name}")
    ctx = BenchContext(scale, db_path, cfg.plan, cfg.seed, progress)
    results: dict[str, Any] = {}
    for name in cfg.benches:
        progress(f"{scale.name}: {name}")
        started = time.perf_counter()
        if name == "recall_search":
            results[name] = asyncio.run(recall_search(ctx))
        elif name == "turn_overhead":
            results[name] = asyncio.run(turn_overhead(ctx))
        elif name == "write":
            results[name] = asyncio.run(write_latency(ctx))
        elif name == "network":
            prof = cfg.out_dir / f"ws_profile_{scale.name}.txt" if cfg.profile else None
            results.update(asyncio.run(network(ctx, prof)))
        elif name == "cluster":
            results[name] = asyncio.run(cluster_capacity(ctx))
        elif name == "chat_endpoint":
            results[name] = asyncio.run(chat_endpoint_overhead(ctx))
        elif name == "purge":
            results[name] = asyncio.run(purge_under_load(ctx))
        elif name == "mcp_search":
            results[name] = asyncio.run(mcp_search(ctx))
        elif name == "learning_overhead":
            results[name] = asyncio.run(learning_overhead(ctx))
        elif name == "vectors":
            results[name] = asyncio.run(vector_costs(ctx))
        elif scale is not cfg.scales[0]:
            # The setup copies and re-indexes the whole corpus: minutes at 1M.
            results[name] = {"skipped": f"run on the {cfg.scales[0].name} corpus only"}
        else:
            results[name] = run_postgres(cfg, scale, corpus, progress)
        progress(f"{scale.name}: {name} done in {time.perf_counter() - started:.1f} s")
    return results


def run_postgres(cfg: RunConfig, scale: Scale, corpus: Path, progress: Progress) -> dict[str, Any]:
    """The PostgreSQL stage on a fresh working copy of ``corpus`` (removed afterwards):
    the other benches leave rows a copy refuses (the vectors bench's, in clear), and the
    SQLite instance it compares with starts as the PostgreSQL copy does."""
    db_path = work_copy(corpus, cfg.cache_dir / f"run-{scale.name}-postgres")
    try:
        return asyncio.run(
            postgres_benches(BenchContext(scale, db_path, cfg.plan, cfg.seed, progress))
        )
    finally:
        shutil.rmtree(db_path.parent, ignore_errors=True)


def run_scaling(cfg: RunConfig, small: Scale, large: Scale, progress: Progress) -> dict[str, Any]:
    """``recall_scaling`` on fresh copies of two corpora (removed afterwards)."""
    ctxs = []
    for tag, scale in (("small", small), ("large", large)):
        corpus = ensure_corpus(cfg.cache_dir, scale, cfg.seed, progress)
        copy = work_copy(corpus, cfg.cache_dir / f"scaling-{tag}")
        ctxs.append(BenchContext(scale, copy, cfg.plan, cfg.seed, progress))
    progress(f"recall scaling: {small.name} and {large.name} side by side")
    try:
        return asyncio.run(recall_scaling(*ctxs))
    finally:
        for ctx in ctxs:
            shutil.rmtree(ctx.data_dir, ignore_errors=True)


def run(cfg: RunConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Run the benches on every configured corpus size; write and return the report."""
    emit = progress or make_progress()
    started = time.time()
    # Other work on the machine slows PicoBot's thread hops more than raw sqlite3 calls;
    # the load averages say how quiet the machine was.
    load_start = os.getloadavg()
    sizes = {s.name: s for s in cfg.scales}
    scaling = None
    if "100k" in sizes and "1M" in sizes and not cfg.only:
        scaling = run_scaling(cfg, sizes["100k"], sizes["1M"], emit)
    by_scale = {scale.name: run_scale(cfg, scale, emit) for scale in cfg.scales}

    def meta() -> dict[str, Any]:
        return {
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "duration_s": round(time.time() - started, 1),
            "machine": f"{os.cpu_count()} CPUs, {platform.system()} {platform.machine()}",
            "load_avg_1_5_15_start": [round(x, 2) for x in load_start],
            "load_avg_1_5_15_end": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "scales": [s.name for s in cfg.scales],
            "corpus_messages": {s.name: s.messages for s in cfg.scales},
            "seed": cfg.seed,
            "plan": {k: getattr(cfg.plan, k) for k in cfg.plan.__dataclass_fields__},
        }

    messages = {s.name: s.messages for s in cfg.scales}
    if cfg.only:
        result = report.build(by_scale, meta(), scaling)
        stem = "-".join(("latest", *cfg.benches))  # latest-network
        for path in report.write_outputs(result, messages, cfg.out_dir, stem=stem):
            emit(f"wrote {path}")
        return result
    # The corpus benches' figures are written first: the prompt-cache chat with the
    # local model can take half an hour on a busy machine, and a run stopped during it
    # should still leave them.
    report.write_outputs(report.build(by_scale, meta(), scaling), messages, cfg.out_dir)
    emit(
        f"prompt cache: {cfg.plan.prompt_turns}-turn chat"
        + (f", time to first token over {cfg.plan.ttft_turns}" if cfg.plan.ttft_turns else "")
    )
    prompt = prompt_cache.run(cfg.plan.prompt_turns, cfg.plan.ttft_turns, cfg.out_dir)
    result = report.build(by_scale, meta(), scaling, prompt)
    for path in report.write_outputs(result, messages, cfg.out_dir, with_chart=cfg.chart):
        emit(f"wrote {path}")
    return result


def _bench_names(value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in BENCHES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown bench {', '.join(unknown) or repr(value)}; choose from {', '.join(BENCHES)}"
        )
    return names


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--scale",
        choices=("small", "full", "tiny"),
        default=os.environ.get("BENCH_SCALE", "full") or "full",
        help="small: 100k messages; full: 100k and 1M (default, or $BENCH_SCALE)",
    )
    parser.add_argument("--seed", type=int, default=int(os.environ.get("BENCH_SEED", "7")))
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--no-chart", action="store_true", help="skip latency.png")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile the PicoBot server in the network bench"
    )
    parser.add_argument(
        "--only",
        type=_bench_names,
        default=(),
        metavar="NAME[,NAME...]",
        help="run these benches alone, e.g. --only network (results in latest-NAME.json):"
        f" {', '.join(BENCHES)}",
    )
    args = parser.parse_args(argv)
    scales: list[Scale]
    if args.scale == "tiny":
        scales, plan = [TINY], SMOKE
    elif args.scale == "small":
        scales, plan = [SCALES["100k"]], STANDARD
    else:
        scales, plan = [SCALES["100k"], SCALES["1M"]], STANDARD
    cfg = RunConfig(
        scales,
        plan,
        seed=args.seed,
        out_dir=args.out,
        chart=not args.no_chart,
        profile=args.profile,
        only=args.only,
    )
    result = run(cfg)
    failed = report.missed(result)
    print(report.markdown(result))
    if failed:
        print(f"targets missed: {', '.join(failed)}", file=sys.stderr)
    # Missing a target is a finding, not an error: the exit status says the run worked.
    return 0
