"""``python -m bench.ceiling``: what bounds the WebSocket latency target.

A side study, not part of ``make bench`` (whose websocket bench runs this module's
``serve raw`` as its bare-SQL server, see :mod:`bench.net`). The websocket bench's
PicoBot server (100 clients, the instant model, the 100k corpus, users of their own
for each run) is run with its turn's work done four ways, alternating, each measured
in a closed loop (capacity) and paced at 750 and 500 turns/s:

- ``picobot``: as shipped;
- ``raw``: ``Kernel.handle`` replaced by the turn's own statements on one plain
  ``sqlite3`` connection in one worker thread (:meth:`bench.raw.RawStore.turn`, the
  turn bench's baseline): no PicoBot code between the channel and SQLite;
- ``minimal``: only the recall query and one commit of both messages, as if the
  session, window, memories and summary were all held in memory;
- ``protocol``: no database work at all, the channel path alone.

The server's own background work (the recall indexer, checkpoints) runs in every mode.
Results go to ``bench/results/ceiling.json``; see docs/performance.md.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import threading
import time
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import make_progress
from bench.corpus import SCALES, TextGen, ensure_corpus, work_copy
from bench.net import WARMUP_TURNS, child, ws_load
from bench.raw import CURRENT, INSERT_MESSAGE, RawStore, RawTurn

HERE = Path(__file__).resolve().parent
MODES = ("picobot", "raw", "minimal", "protocol")
RATES = (750.0, 500.0)
CLIENTS = 100
TURNS = 100


def _minimal_turn(
    store: RawStore, sessions: dict[str, str], user: str, text: str, reply: str
) -> None:
    """The least a turn with recall does: the query, then both messages in one commit."""
    from picobot.recall.keywords import extract_terms
    from picobot.store.retrieval.search import SearchQuery, search_sql

    c = store.conn
    sid = sessions.get(user)
    if sid is None:
        sid = sessions[user] = c.execute(CURRENT, ("ws", user, user)).fetchall()[0][0]
    terms = extract_terms(text, 8)
    if terms:
        sql, params = search_sql(SearchQuery(user, terms, limit=20, include_memories=False))
        c.execute(sql, params).fetchall()
    now = time.time()
    c.execute("BEGIN IMMEDIATE")
    c.execute(INSERT_MESSAGE, (sid, "user", text, len(text) // 4 + 1, now)).fetchall()
    c.execute(INSERT_MESSAGE, (sid, "assistant", reply, len(reply) // 4 + 1, now)).fetchall()
    c.execute("COMMIT")


def serve(mode: str, data_dir: Path) -> None:
    """The server child: ``bench.server``'s PicoBot with the turn's work done ``mode``'s way."""
    from bench.server import bench_replies, run_picobot
    from picobot.kernel.kernel import Kernel
    from picobot.messages import Inbound, Outbound, OutboundKind
    from picobot.recall.keywords import extract_terms

    if mode != "picobot":
        pool = ThreadPoolExecutor(1)
        local = threading.local()
        sessions: dict[str, str] = {}
        # PicoBot's replies, in its order: stored alike, a returning user's history (and
        # so their recall) is as long and as rich on both servers.
        replies = itertools.cycle(bench_replies())

        def work(user: str, text: str, reply: str) -> None:
            store = getattr(local, "store", None)
            if store is None:
                store = local.store = RawStore(data_dir / "conversations.db")
            if mode == "raw":
                store.turn(RawTurn(user, text, reply, extract_terms(text, 8), time.time()))
            else:
                _minimal_turn(store, sessions, user, text, reply)

        async def handle(self: Kernel, inbound: Inbound) -> AsyncIterator[Outbound]:
            user = inbound.identity.user_id
            reply = next(replies)
            if mode != "protocol":
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(pool, work, user, inbound.text, reply)
            sid = f"s-{user}"
            yield Outbound(OutboundKind.SESSION, session_id=sid)
            yield Outbound(OutboundKind.TOKEN, reply, session_id=sid)
            yield Outbound(OutboundKind.DONE, reply, session_id=sid)

        Kernel.handle = handle  # type: ignore[method-assign]
    asyncio.run(run_picobot(data_dir, "http://127.0.0.1:9/unused"))


async def _measure(mode: str, data_dir: Path, gen: TextGen) -> dict[str, Any]:
    log = data_dir / f"ceiling-{mode}.log"
    out: dict[str, Any] = {}
    async with child(["serve", mode, str(data_dir)], log, module="bench.ceiling") as urls:
        for run, rate in enumerate((None, *RATES)):
            first = run * CLIENTS  # users of its own, as in the websocket bench
            users = [first + j % CLIENTS for j in range(CLIENTS * (WARMUP_TURNS + TURNS))]
            texts = gen.texts_for(users)
            result = await ws_load(
                urls["ws"], CLIENTS, TURNS, texts, picobot=True, rate=rate, first_user=first
            )
            out["capacity" if rate is None else f"paced_{rate:g}"] = {
                "turns_per_s": result["turns_per_s"],
                "p50_ms": result["latency_ms"]["p50"],
                "p95_ms": result["latency_ms"]["p95"],
                "error_frames": result["error_frames"],
            }
    return out


def main(argv: Sequence[str]) -> int:
    """``serve MODE DATA_DIR`` (the child), or ``[ROUNDS]`` (default 2) to measure."""
    if argv and argv[0] == "serve":
        serve(argv[1], Path(argv[2]))
        return 0
    rounds = int(argv[0]) if argv else 2
    progress = make_progress()
    scale = SCALES["100k"]
    corpus = ensure_corpus(HERE / ".cache", scale, 7, progress)
    gen = TextGen(7, stream=7 + 1000)
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for _, mode in itertools.product(range(rounds), MODES):
        db = work_copy(corpus, HERE / ".cache" / "ceiling")
        progress(f"ceiling: {mode}")
        result = asyncio.run(_measure(mode, db.parent, gen))
        runs[mode].append(result)
        cells = ", ".join(
            f"{key} {v['turns_per_s']}/s p95 {v['p95_ms']} ms" for key, v in result.items()
        )
        progress(f"  {mode}: {cells}")
    target = HERE / "results" / "ceiling.json"
    target.write_text(json.dumps(runs, indent=2) + "\n", encoding="utf-8")
    progress(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
