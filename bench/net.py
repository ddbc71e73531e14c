"""websocket and webhook: PicoBot's ``serve`` in a child process vs baseline servers.

Each server runs in its own process (``bench.server``), so on a 2-core machine the
server has one core and the clients, in this process, the other. WebSocket clients
run closed loops: send a chat message, read until the answer is complete (PicoBot:
the ``end`` frame; echo: the echoed frame), repeat. Three WebSocket servers run in
the same run, with the same clients and the same messages:

- ``picobot``: ``serve`` on the bench's working copy of the corpus;
- ``bare_sql``: the same server with ``Kernel.handle`` replaced by the turn's own
  statements on one plain ``sqlite3`` connection (``python -m bench.ceiling serve
  raw``), on a copy of the working copy made when the bench starts, so the two
  servers start from the same data and neither one's turns lengthen the other's
  users' histories or take its write lock. The websocket target is PicoBot's
  capacity over this server's;
- ``raw_echo``: a plain ``websockets`` echo server (context: the cost of the
  protocol and the clients alone);
- ``picobot_quiet``: PicoBot with summaries and learning off, on a copy of its own, in
  the closed-loop runs only: a long session starts that work beside its turns, and the
  bare-SQL server has no counterpart for it, so this server's returning users show
  what the turn path alone (recall included) costs them.

The webhook bench posts to PicoBot and to a plain aiohttp handler; the webhook's
replies go to a sink in another process, as a platform's API would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from websockets.asyncio.client import ClientConnection, connect

from bench.common import BenchContext
from bench.server import (
    KEYED_USERS,
    QUIET,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WEBHOOK_SECRET,
    api_key,
)
from bench.stats import dist_ms, now_ns, ratio
from picobot.channels.webhook.platforms.generic import sign
from picobot.store.keys.keyring import KEY_STORE_FILE
from picobot.store.keys.master import DEFAULT_KEY_FILE

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 60.0
WARMUP_TURNS = 2


@asynccontextmanager
async def child(
    args: Sequence[str],
    log: Path,
    profile: Path | None = None,
    module: str = "bench.server",
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[Any]:
    """Run ``python -m MODULE ARGS``; yield its ``{"ws", "http"}`` URLs. ``env``: more
    environment variables for the child (over this process's)."""
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)}
    if profile is not None:
        env["BENCH_PROFILE"] = str(profile)
    with log.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            module,
            *args,
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
        )
        try:
            assert proc.stdout is not None
            async with asyncio.timeout(START_TIMEOUT):
                line = await proc.stdout.readline()
            if not line:
                raise RuntimeError(f"bench server {args[0]} failed to start; see {log}")
            yield {**json.loads(line), "pid": proc.pid}
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    async with asyncio.timeout(30):
                        await proc.wait()
                except TimeoutError:
                    proc.kill()
                    await proc.wait()


async def _client_loop(
    ws: ClientConnection,
    texts: Sequence[str],
    until_end: bool,
    out: list[int],
    pace: tuple[float, float] | None = None,
) -> int:
    """Turns in a loop; returns the number of error frames seen.

    Without ``pace`` the next turn starts as soon as one ends (a closed loop). With
    ``pace = (first, interval)`` (loop-clock seconds) turn k starts at
    ``first + k * interval``, or at once if the previous answer came later.
    """
    loop = asyncio.get_running_loop()
    errors = 0
    for i, text in enumerate(texts):
        if pace is not None:
            delay = pace[0] + i * pace[1] - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
        frame = json.dumps({"type": "chat", "text": text, "id": str(i)})
        start = now_ns()
        await ws.send(frame)
        while True:
            got = await ws.recv()
            assert isinstance(got, str)
            if not until_end or got.startswith('{"type":"end"'):
                break
            if got.startswith('{"type":"error"'):
                errors += 1
        out.append(now_ns() - start)
    return errors


async def ws_load(
    url: str | Sequence[str],
    clients: int,
    turns: int,
    texts: Sequence[str],
    *,
    picobot: bool,
    rate: float | None = None,
    first_user: int = 0,
) -> dict[str, Any]:
    """``clients`` concurrent loops of ``turns`` turns each, after a warm-up.

    Client ``i`` chats as corpus user ``first_user + i`` and sends ``texts[k * clients +
    i]`` in its turn ``k`` (:func:`run_texts` makes them). ``rate`` (turns/s over all
    clients) paces them: each client sends every ``clients / rate`` seconds, the clients
    evenly out of phase. Without it they run closed loops, which measures capacity.
    Given several URLs (instances of one service), client ``i`` connects to
    ``url[i % len(url)]``, as a load balancer keeping each user on one instance would.
    """
    urls = [url] if isinstance(url, str) else list(url)
    conns: list[ClientConnection] = []
    try:
        for i in range(clients):
            key = api_key(first_user + i)
            headers = {"Authorization": f"Bearer {key}"} if picobot else None
            ws = await connect(
                urls[i % len(urls)], additional_headers=headers, open_timeout=START_TIMEOUT
            )
            conns.append(ws)
            if picobot:
                await ws.recv()  # hello
        per = WARMUP_TURNS + turns
        if len(texts) < clients * per:
            raise ValueError(f"{clients * per} texts needed, {len(texts)} given")
        scripts = [[texts[k * clients + i] for k in range(per)] for i in range(clients)]
        warm: list[int] = []
        await asyncio.gather(
            *(
                _client_loop(ws, s[:WARMUP_TURNS], picobot, warm)
                for ws, s in zip(conns, scripts, strict=True)
            )
        )
        samples: list[int] = []
        t0 = asyncio.get_running_loop().time() + 0.05
        interval = clients / rate if rate else 0.0
        start = now_ns()
        errors = await asyncio.gather(
            *(
                _client_loop(
                    ws,
                    s[WARMUP_TURNS:],
                    picobot,
                    samples,
                    (t0 + i * interval / clients, interval) if rate else None,
                )
                for i, (ws, s) in enumerate(zip(conns, scripts, strict=True))
            )
        )
        wall = (now_ns() - start) / 1e9
    finally:
        for ws in conns:
            with contextlib.suppress(Exception):
                await ws.close()
    return {
        "clients": clients,
        "offered_turns_per_s": rate,
        "turns": len(samples),
        "wall_s": round(wall, 3),
        "turns_per_s": round(len(samples) / wall, 1),
        "latency_ms": dist_ms(samples),
        "error_frames": sum(errors),
    }


async def webhook_rtts(
    pico_url: str, raw_url: str, n: int, warmup: int, texts: Sequence[str]
) -> tuple[list[int], list[int]]:
    """Signed generic-webhook POSTs, alternating PicoBot and raw; ack round trips."""
    secret = WEBHOOK_SECRET.encode()
    pico: list[int] = []
    raw: list[int] = []
    async with aiohttp.ClientSession() as session:
        for i in range(warmup + n):
            body = json.dumps(
                {
                    "user": f"hook{i % 50:02d}",
                    "chat": f"hook{i % 50:02d}",
                    "text": texts[i % len(texts)],
                    "message_id": f"m{i}",
                }
            ).encode()
            stamp = str(int(time.time()))
            headers = {
                "Content-Type": "application/json",
                TIMESTAMP_HEADER: stamp,
                SIGNATURE_HEADER: sign(secret, body, stamp),
            }
            for side in ("pico", "raw") if i % 2 == 0 else ("raw", "pico"):
                url = (pico_url if side == "pico" else raw_url) + "/webhooks/generic"
                start = now_ns()
                async with session.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"{side} webhook answered HTTP {resp.status}")
                elapsed = now_ns() - start
                if i >= warmup:
                    (pico if side == "pico" else raw).append(elapsed)
    return pico, raw


def run_texts(ctx: BenchContext, first_user: int, clients: int) -> list[str]:
    """The messages of one WebSocket run: ``[k * clients + i]`` is client ``i``'s turn
    ``k``, about the topics of its user ``first_user + i``."""
    per = WARMUP_TURNS + ctx.plan.ws_turns
    return ctx.gen.texts_for([first_user + j % clients for j in range(clients * per)])


def server_copy(db_path: Path, work_dir: Path) -> Path:
    """A copy of the working copy ``db_path`` (no connection may be open on it) as
    ``work_dir/conversations.db``, with the key store and master key beside it, for a
    server of its own (the bare-SQL server, the quiet PicoBot); returns its directory."""
    conn = sqlite3.connect(db_path)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.close()
    if busy:
        raise RuntimeError(f"{db_path} is in use; cannot copy it for another server")
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True)
    shutil.copyfile(db_path, work_dir / "conversations.db")
    for name in (KEY_STORE_FILE, DEFAULT_KEY_FILE):
        if (db_path.parent / name).exists():
            shutil.copy2(db_path.parent / name, work_dir / name)
    return work_dir


def _capacity(run: dict[str, Any]) -> float:
    return float(run["capacity"]["turns_per_s"])


def _half_p95(run: dict[str, Any]) -> float:
    return float(run["paced_half_capacity"]["latency_ms"]["p95"])


async def network(ctx: BenchContext, profile: Path | None = None) -> dict[str, Any]:
    """The websocket and webhook results for one corpus."""
    bare, quiet = (ctx.data_dir.with_name(ctx.data_dir.name + t) for t in ("-bare", "-quiet"))
    try:
        return await _network(
            ctx, server_copy(ctx.db_path, bare), server_copy(ctx.db_path, quiet), profile
        )
    finally:
        for copy in (bare, quiet):
            shutil.rmtree(copy, ignore_errors=True)


async def _network(
    ctx: BenchContext, bare_dir: Path, quiet_dir: Path, profile: Path | None
) -> dict[str, Any]:
    plan = ctx.plan
    clients = min(plan.ws_clients, ctx.scale.users)
    logs = ctx.data_dir
    async with (
        child(["raw"], logs / "raw-server.log") as raw_urls,
        child(["sink"], logs / "sink-server.log") as sink_urls,
        child(
            ["picobot", str(ctx.data_dir), sink_urls["http"]], logs / "picobot-server.log", profile
        ) as pico_urls,
        child(
            ["serve", "raw", str(bare_dir)], logs / "bare-sql-server.log", module="bench.ceiling"
        ) as bare_urls,
        child(
            ["picobot", str(quiet_dir), sink_urls["http"], QUIET], logs / "quiet-server.log"
        ) as quiet_urls,
    ):
        servers = {
            "raw_echo": (raw_urls, False),
            "picobot": (pico_urls, True),
            "bare_sql": (bare_urls, True),
            "picobot_quiet": (quiet_urls, True),
        }
        runs: dict[str, dict[str, Any]] = {name: {} for name in servers}
        # The echo server first (it does no database work); PicoBot and the bare-SQL
        # server swap places between the two runs. PicoBot's capacity comes first, as
        # the paced run's rate depends on it.
        # The last stage brings the first one's users back: each carries on the session
        # in which it sent its turns, now long, as a returning user does.
        stages = (
            ("capacity", False, ("raw_echo", "picobot", "bare_sql", "picobot_quiet"), 0),
            ("paced_half_capacity", True, ("raw_echo", "bare_sql", "picobot"), 1),
            ("returning_capacity", False, ("picobot", "bare_sql", "picobot_quiet"), 0),
        )
        for key, paced, order, users_of in stages:
            # Latency at a load PicoBot sustains: half its measured capacity, offered
            # to every server alike.
            offered = max(1.0, round(_capacity(runs["picobot"]) / 2)) if paced else None
            # Users of its own for each of the first runs: a run adds dozens of messages
            # to each of its users' histories, which makes their later turns dearer.
            fresh = (users_of + 1) * clients <= min(ctx.scale.users, KEYED_USERS)
            first = users_of * clients if fresh else 0
            texts = run_texts(ctx, first, clients)
            for name in order:
                urls, is_pico = servers[name]
                how = "closed loop" if offered is None else f"paced at {offered:g} turns/s"
                ctx.progress(f"  websocket {name}: {clients} clients x {plan.ws_turns}, {how}")
                runs[name][key] = await ws_load(
                    urls["ws"],
                    clients,
                    plan.ws_turns,
                    texts,
                    picobot=is_pico,
                    rate=offered,
                    first_user=first,
                )
                await asyncio.sleep(plan.ws_settle_s)
        ctx.progress(f"  webhook: {plan.webhook_requests} signed POSTs each")
        hook_pico, hook_raw = await webhook_rtts(
            pico_urls["http"], raw_urls["http"], plan.webhook_requests, plan.warmup, texts
        )
    pico, bare, echo = runs["picobot"], runs["bare_sql"], runs["raw_echo"]
    quiet = runs["picobot_quiet"]
    half = pico["paced_half_capacity"]
    websocket = {
        "turns_per_s": _capacity(pico),
        "bare_sql_turns_per_s": _capacity(bare),
        "capacity_ratio": ratio(_capacity(pico), _capacity(bare)),
        "returning_turns_per_s": pico["returning_capacity"]["turns_per_s"],
        "bare_sql_returning_turns_per_s": bare["returning_capacity"]["turns_per_s"],
        "returning_capacity_ratio": ratio(
            pico["returning_capacity"]["turns_per_s"], bare["returning_capacity"]["turns_per_s"]
        ),
        "quiet_capacity_ratio": ratio(_capacity(quiet), _capacity(bare)),
        "quiet_returning_turns_per_s": quiet["returning_capacity"]["turns_per_s"],
        "quiet_returning_capacity_ratio": ratio(
            quiet["returning_capacity"]["turns_per_s"], bare["returning_capacity"]["turns_per_s"]
        ),
        "half_capacity_turns_per_s": half["offered_turns_per_s"],
        "half_capacity_delivered_turns_per_s": half["turns_per_s"],
        "bare_sql_half_capacity_delivered_turns_per_s": bare["paced_half_capacity"]["turns_per_s"],
        "half_capacity_p50_ms": half["latency_ms"]["p50"],
        "half_capacity_p95_ms": _half_p95(pico),
        "bare_sql_half_capacity_p95_ms": _half_p95(bare),
        "half_capacity_p95_ratio": ratio(_half_p95(pico), _half_p95(bare)),
        "echo_turns_per_s": _capacity(echo),
        "echo_capacity_ratio": ratio(_capacity(pico), _capacity(echo)),
        "echo_half_capacity_p95_ms": _half_p95(echo),
        "error_frames": sum(
            r["error_frames"] for side in (pico, bare, quiet) for r in side.values()
        ),
        "picobot": pico,
        "picobot_quiet": quiet,
        "bare_sql": bare,
        "raw_echo": echo,
    }
    hp, hr = dist_ms(hook_pico), dist_ms(hook_raw)
    webhook = {
        "picobot_ms": hp,
        "raw_ms": hr,
        "p50_ratio": ratio(hp["p50"], hr["p50"]),
        "p95_ratio": ratio(hp["p95"], hr["p95"]),
    }
    return {"websocket": websocket, "webhook": webhook}
