"""write: single-message commits through ``MessageRepo.append`` vs a raw single-row commit.

Both sides' INSERT only queues the message for the recall index (m006); a third side,
``raw_indexed_in_the_commit``, also indexes it in the same transaction (what indexing
in the commit would cost), and ``indexer`` times one batched run of the runtime's
indexer over everything the bench queued: what the indexing costs, off the write path.

Also finds out whether WAL checkpoints run on the hot path: in WAL mode only a
checkpoint writes to the main database file, so a write during which the file's mtime
changed ran one. SQLite's default ``wal_autocheckpoint`` (1000 pages) makes the commit
that crosses the threshold copy the WAL into the database and fsync it, inline.

A second phase repeats the writes with a background thread checkpointing (PASSIVE)
every 200 ms on its own connection, as PicoBot's runtime does every second (its writer
runs with ``wal_autocheckpoint=0``; this bench opens the database without a runtime).
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import BenchContext
from bench.corpus import user_id
from bench.raw import CURRENT, RawStore
from bench.stats import Ticker, dist_ms, now_ns, ratio
from picobot.runtime import open_database
from picobot.store.connect import install_functions
from picobot.store.conversation.messages import MessageRepo
from picobot.store.db import Database
from picobot.store.retrieval.search import SearchIndex

CHECKPOINT_EVERY_SECS = 0.2


def _mtime(path: Path) -> int:
    return os.stat(path).st_mtime_ns


class _Checkpointer:
    """A background PASSIVE checkpoint loop on its own connection (the proposed fix)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-checkpointer")
        self.runs = 0

    def __enter__(self) -> _Checkpointer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        install_functions(conn)
        try:
            conn.execute("PRAGMA busy_timeout=5000").fetchall()
            while not self._stop.wait(CHECKPOINT_EVERY_SECS):
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                self.runs += 1
        finally:
            conn.close()


async def _set_autocheckpoint(db: Database, pages: int) -> None:
    # The bench reaches into the writer connection to try the fix; PicoBot's code is
    # not changed by it.
    async with db._writer.execute(f"PRAGMA wal_autocheckpoint={pages}") as cur:
        await cur.fetchall()


async def write_latency(ctx: BenchContext) -> dict[str, Any]:
    """p50/p99 of ``MessageRepo.append`` vs raw INSERT+COMMIT; hot-path checkpoints."""
    plan = ctx.plan
    total = plan.warmup + plan.write_iters
    texts = ctx.gen.texts(total)
    raw = RawStore(ctx.db_path)
    sessions = [raw.query(CURRENT, ("ws", user_id(u), user_id(u)))[0][0] for u in ctx.users(64)]
    samples: dict[str, list[int]] = {"pico": [], "raw": [], "raw_same": [], "raw_indexed": []}
    checkpoints = dict.fromkeys(samples, 0)
    slow_with_checkpoint: list[int] = []
    tick = Ticker("write", total, ctx.progress)
    path = ctx.db_path
    try:
        async with open_database(ctx.settings()) as db:
            repo = MessageRepo(db)
            for i in range(total):
                sid = sessions[i % len(sessions)]
                text = texts[i]
                tokens = math.ceil(len(text) / 4)
                sides = ("pico", "raw", "raw_same", "raw_indexed")
                for side in sides if i % 2 == 0 else reversed(sides):
                    before = _mtime(path)
                    start = now_ns()
                    if side == "pico":
                        await repo.append(sid, "user", text, tokens, created_at=time.time())
                    elif side == "raw":
                        raw.insert_commit(sid, "user", text, tokens, time.time())
                    elif side == "raw_indexed":
                        raw.insert_commit(sid, "user", text, tokens, time.time(), index_now=True)
                    else:
                        raw.append(sid, "user", text, tokens, time.time())
                    elapsed = now_ns() - start
                    if i < plan.warmup:
                        continue
                    samples[side].append(elapsed)
                    if _mtime(path) != before:
                        checkpoints[side] += 1
                        if side == "pico":
                            slow_with_checkpoint.append(elapsed)
                tick.step(i + 1)
            fixed = await _with_background_checkpoints(ctx, db, repo, sessions, texts)
            indexer = await _index_queue(db)
    finally:
        raw.close()
    pico, base, same, indexed = (
        dist_ms(samples["pico"]),
        dist_ms(samples["raw"]),
        dist_ms(samples["raw_same"]),
        dist_ms(samples["raw_indexed"]),
    )
    bound = 3 * pico["p50"] + 1.0
    return {
        "picobot_ms": pico,
        "raw_ms": base,
        "raw_same_statements_ms": same,
        "raw_indexed_in_the_commit_ms": indexed,
        "indexer": indexer,
        "p50_ratio": ratio(pico["p50"], base["p50"]),
        "p99_ratio": ratio(pico["p99"], base["p99"]),
        "p99_bound_ms": round(bound, 4),
        "p99_over_bound": ratio(pico["p99"], bound),
        "hot_path_checkpoints": {
            "picobot_writes": checkpoints["pico"],
            "raw_writes": sum(n for side, n in checkpoints.items() if side != "pico"),
            "picobot_share_pct": round(100 * checkpoints["pico"] / max(1, len(samples["pico"])), 2),
            "picobot_ms_when_checkpointing": dist_ms(slow_with_checkpoint)
            if slow_with_checkpoint
            else None,
        },
        "with_background_checkpoint": fixed,
    }


async def _index_queue(db: Database) -> dict[str, Any]:
    """What the runtime's indexer pays for the messages this bench queued, in one run."""
    start = now_ns()
    count = await SearchIndex(db).index_pending(None)
    elapsed_ms = (now_ns() - start) / 1e6
    return {
        "messages": count,
        "ms": round(elapsed_ms, 3),
        "ms_per_message": round(elapsed_ms / max(1, count), 4),
    }


async def _with_background_checkpoints(
    ctx: BenchContext, db: Database, repo: MessageRepo, sessions: list[str], texts: list[str]
) -> dict[str, Any]:
    """The same PicoBot writes with autocheckpoint off and a background checkpointer."""
    n = ctx.plan.write_iters
    samples: list[int] = []
    await _set_autocheckpoint(db, 0)
    try:
        with _Checkpointer(ctx.db_path) as checkpointer:
            for i in range(n):
                text = texts[i % len(texts)]
                start = now_ns()
                await repo.append(
                    sessions[i % len(sessions)],
                    "user",
                    text,
                    math.ceil(len(text) / 4),
                    created_at=time.time(),
                )
                samples.append(now_ns() - start)
        runs = checkpointer.runs
    finally:
        await _set_autocheckpoint(db, 1000)
    pico = dist_ms(samples)
    return {
        "picobot_ms": pico,
        "p99_bound_ms": round(3 * pico["p50"] + 1.0, 4),
        "background_checkpoints": runs,
        "how": "writer PRAGMA wal_autocheckpoint=0 + PASSIVE checkpoint every "
        f"{CHECKPOINT_EVERY_SECS:g}s on a separate connection (thread)",
    }
