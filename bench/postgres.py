"""postgres: the issue's PostgreSQL figures, as ratios against baselines of the same run.

Run last in ``python -m bench``, on a fresh working copy of the cached corpus (the other
benches leave rows a copy refuses: the vectors bench's random vectors, unsealed):

1. Setup. The server is ``$PICOBOT_BENCH_POSTGRES`` (a ``postgresql://`` URL of a role
   that may create databases) or else a throwaway cluster started with
   ``tests/pg/cluster.py`` (durability off: no fsync, no synchronous commit). With
   neither server binaries nor that variable, the stage is skipped and the results say
   so. The working copy is copied into a fresh database with ``StoreCopy`` (timed);
   the recall index, which the copy leaves to the indexer, is then rebuilt by
   ``SearchIndex.index_pending`` run to an empty queue (timed), and the tables are
   ANALYZEd (timed: what an operator runs after a bulk load; autovacuum would later).
   The database is dropped at the end.
2. ``turn_overhead``: :func:`bench.turn.turn_overhead` with PicoBot on PostgreSQL and
   the raw side on one plain psycopg connection (:meth:`bench.raw.RawStore.postgres`).
   Target: p95 ratio <= 2.5.
3. ``cluster``: :func:`bench.cluster.capacity_runs` with two ``serve`` instances on the
   database (a data directory each, ``PICOBOT_STORE__URL`` and the same
   ``PICOBOT_MASTER_KEY``), and one on the SQLite working copy: the capacity of one
   SQLite instance, then one PostgreSQL instance, then two, each on fresh users, with
   half the plan's turns per client (the stage's time budget).
   Figures: two PostgreSQL instances over one, one PostgreSQL instance over one SQLite.
4. ``purge``: :func:`bench.purge.purge_under_load` on the copy, the victim (at most
   :data:`VICTIM_SESSIONS` sessions of 100 messages) built into the working copy before
   it is copied: other users' turn p99 during the purge over without one.

``python -m bench.postgres [--scale small|tiny] [--out FILE]`` runs this stage alone on
a fresh working copy of the cached corpus, as ``python -m bench`` does, and prints (or
writes) its results as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg

from bench.cluster import Instance, capacity_runs, two_against_one
from bench.common import SMOKE, STANDARD, BenchContext, make_progress
from bench.corpus import SCALES, TINY, add_victim, ensure_corpus, work_copy
from bench.purge import purge_under_load
from bench.raw import RawStore
from bench.stats import ratio
from bench.turn import turn_overhead
from picobot.config.keys import KeySettings
from picobot.runtime import open_database
from picobot.store.keys.master import DEFAULT_KEY_FILE, encode_key, read_key_file
from picobot.store.postgres.copy import StoreCopy
from picobot.store.retrieval.search import SearchIndex
from tests.pg.cluster import Cluster, ClusterError, find_bindir, temporary_database

SERVER_ENV = "PICOBOT_BENCH_POSTGRES"
"""A PostgreSQL server URL to use instead of a throwaway cluster."""
VICTIM_SESSIONS = 200
"""Sessions of 100 messages of the user purged on PostgreSQL (at most the plan's): its
messages are copied and indexed in the setup, so they cost setup time too."""
CAPACITY_TURNS_SHARE = 0.5
"""Of the plan's turns per WebSocket client, what each capacity run here makes: on a
PostgreSQL server sharing the machine's two cores one instance serves about 70 turns/s,
so the plan's 6,000 turns took 90 s a run; 3,000 still span some 40 s of the runtime's
periodic work (the indexer every 0.5 s)."""
INDEX_BATCH = 5000
"""Queued records indexed per write while the recall index is rebuilt."""


@contextmanager
def postgres_server() -> Iterator[tuple[str | None, str]]:
    """``(server URL, where it comes from)``: ``$PICOBOT_BENCH_POSTGRES``, else a
    throwaway cluster (stopped and deleted on exit), else ``(None, why not)`` (no server
    binaries, or a cluster that would not start)."""
    given = os.environ.get(SERVER_ENV, "")
    if given:
        yield given, f"${SERVER_ENV}"
        return
    bindir = find_bindir()
    if bindir is None:
        yield None, f"no PostgreSQL server binaries (initdb, pg_ctl, postgres) and no ${SERVER_ENV}"
        return
    try:
        cluster = Cluster.start(bindir)
    except ClusterError as exc:
        yield None, f"the throwaway cluster did not start: {exc}"
        return
    with cluster:
        yield cluster.url, f"throwaway cluster ({bindir}, fsync and synchronous_commit off)"


async def load_corpus(ctx: BenchContext, url: str) -> tuple[BenchContext, dict[str, Any]]:
    """Build the purge's victim into ``ctx``'s working copy, copy that into the empty
    database at ``url`` and rebuild its recall index; returns the context of the copy
    (its own data directory, holding the same master key) and the setup's figures (the
    victim's user id as ``victim``)."""
    sessions = min(ctx.plan.victim_sessions, VICTIM_SESSIONS)
    ctx.progress(f"  postgres: building the purge's victim ({sessions * 100:,} messages)")
    victim = add_victim(ctx.db_path, sessions, ctx.seed, lambda _m: None)
    pg_dir = ctx.data_dir / "postgres"
    shutil.rmtree(pg_dir, ignore_errors=True)
    pg_dir.mkdir()
    shutil.copy2(ctx.data_dir / DEFAULT_KEY_FILE, pg_dir / DEFAULT_KEY_FILE)
    pg_ctx = replace(ctx, db_path=pg_dir / ctx.db_path.name, store_url=url)
    ctx.progress("  postgres: copying the working copy (StoreCopy)")
    started = time.perf_counter()
    copied = await StoreCopy(ctx.db_path, url, key_settings=KeySettings(), environ={}).run()
    copy_s = time.perf_counter() - started
    ctx.progress(f"  postgres: copied {copied.rows:,} rows in {copy_s:.1f} s; indexing")
    started = time.perf_counter()
    indexed = 0
    async with open_database(pg_ctx.settings()) as db:
        index = SearchIndex(db)
        while (n := await index.index_pending(INDEX_BATCH)) > 0:
            indexed += n
    index_s = time.perf_counter() - started
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")
    analyze_s = time.perf_counter() - started
    return pg_ctx, {
        "victim": victim,
        "rows_copied": copied.rows,
        "copy_s": round(copy_s, 1),
        "records_indexed": indexed,
        "index_rebuild_s": round(index_s, 1),
        "analyze_s": round(analyze_s, 1),
    }


async def postgres_cluster(ctx: BenchContext, pg_ctx: BenchContext) -> dict[str, Any]:
    """One SQLite instance, one PostgreSQL instance, then two, in the same run, each
    client with half the plan's turns (:data:`CAPACITY_TURNS_SHARE`)."""
    turns = max(1, int(ctx.plan.ws_turns * CAPACITY_TURNS_SHARE))
    ctx = replace(ctx, plan=replace(ctx.plan, ws_turns=turns))
    master = encode_key(read_key_file(ctx.data_dir / DEFAULT_KEY_FILE).key)
    env = {"PICOBOT_STORE__URL": pg_ctx.store_url, "PICOBOT_MASTER_KEY": master}
    instances = [Instance("sqlite", ctx.data_dir)]
    for name in ("a", "b"):
        (pg_ctx.data_dir / name).mkdir(exist_ok=True)
        instances.append(Instance(f"pg-{name}", pg_ctx.data_dir / name, env))
    runs = await capacity_runs(
        ctx,
        instances,
        [("sqlite_one", [0]), ("one", [1]), ("two", [1, 2])],
        "pg-cluster",
    )
    sqlite_one = runs["sqlite_one"]
    return {
        **two_against_one(runs["one"], runs["two"]),
        "sqlite_one_instance_turns_per_s": sqlite_one["turns_per_s"],
        "sqlite_one_instance_p50_ms": sqlite_one["latency_ms"]["p50"],
        "postgres_over_sqlite_ratio": ratio(runs["one"]["turns_per_s"], sqlite_one["turns_per_s"]),
    }


async def postgres_benches(ctx: BenchContext) -> dict[str, Any]:
    """Setup, ``turn_overhead``, ``cluster`` and ``purge`` on PostgreSQL (the module's text);
    ``{"skipped": why}`` when no server can be had."""
    with postgres_server() as (server, source):
        if server is None:
            ctx.progress(f"  postgres: skipped: {source}")
            return {"skipped": source}
        with temporary_database(server) as url:
            pg_ctx, setup = await load_corpus(ctx, url)
            ctx.progress("  postgres: turn overhead")
            raw = RawStore.postgres(url, pg_ctx.data_dir)
            turn = await turn_overhead(pg_ctx, raw)
            ctx.progress("  postgres: capacity")
            cluster = await postgres_cluster(ctx, pg_ctx)
            ctx.progress("  postgres: purge under load")
            purge = await purge_under_load(pg_ctx, setup.pop("victim"))
    shutil.rmtree(pg_ctx.data_dir, ignore_errors=True)
    return {
        "turn_p50_ratio": turn["p50_ratio"],
        "turn_p95_ratio": turn["p95_ratio"],
        "capacity_ratio": cluster["capacity_ratio"],
        "postgres_over_sqlite_ratio": cluster["postgres_over_sqlite_ratio"],
        "error_frames": cluster["error_frames"],
        "purge_p99_ratio": purge["p99_ratio"],
        "server": source,
        "setup": setup,
        "turn_overhead": turn,
        "cluster": cluster,
        "purge": purge,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """This stage alone on a fresh working copy of the 100k (or tiny) corpus."""
    parser = argparse.ArgumentParser(prog="python -m bench.postgres", description=__doc__)
    parser.add_argument("--scale", choices=("small", "tiny"), default="small")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("BENCH_SEED", "7")))
    parser.add_argument("--out", type=Path, help="write the JSON here too")
    args = parser.parse_args(argv)
    scale, plan = (SCALES["100k"], STANDARD) if args.scale == "small" else (TINY, SMOKE)
    cache = Path(__file__).resolve().parent / ".cache"
    progress = make_progress()
    corpus = ensure_corpus(cache, scale, args.seed, progress)
    db_path = work_copy(corpus, cache / f"run-postgres-{scale.name}")
    ctx = BenchContext(scale, db_path, plan, args.seed, progress)
    load = os.getloadavg()
    result = asyncio.run(postgres_benches(ctx))
    result["load_avg_1_5_15_start_end"] = [list(load), list(os.getloadavg())]
    text = json.dumps(result, indent=1)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
