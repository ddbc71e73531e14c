"""websocket and webhook: PicoBot's ``serve`` in a child process vs raw servers.

Each server runs in its own process (``bench.server``), so on a 2-core machine the
server has one core and the clients, in this process, the other; the raw baselines
(a ``websockets`` echo server, an aiohttp POST handler) run the same way in the same
run. WebSocket clients run closed loops: send a chat message, read until the answer
is complete (PicoBot: the ``end`` frame; echo: the echoed frame), repeat. The
webhook's replies go to a sink in a third process, as a platform's API would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from websockets.asyncio.client import ClientConnection, connect

from bench.common import BenchContext
from bench.server import (
    KEYED_USERS,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WEBHOOK_SECRET,
    api_key,
)
from bench.stats import dist_ms, now_ns, ratio
from picobot.channels.webhook.platforms.generic import sign

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 60.0
WARMUP_TURNS = 2


@asynccontextmanager
async def child(
    args: Sequence[str], log: Path, profile: Path | None = None, module: str = "bench.server"
) -> AsyncIterator[Any]:
    """Run ``python -m MODULE ARGS``; yield its ``{"ws", "http"}`` URLs."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
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
    url: str,
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
    """
    conns: list[ClientConnection] = []
    try:
        for i in range(clients):
            key = api_key(first_user + i)
            headers = {"Authorization": f"Bearer {key}"} if picobot else None
            ws = await connect(url, additional_headers=headers, open_timeout=START_TIMEOUT)
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


async def network(ctx: BenchContext, profile: Path | None = None) -> dict[str, Any]:
    """The websocket and webhook results for one corpus."""
    plan = ctx.plan
    clients = min(plan.ws_clients, ctx.scale.users)
    texts = run_texts(ctx, 0, clients)
    logs = ctx.data_dir
    rate = float(plan.ws_rate)
    async with (
        child(["raw"], logs / "raw-server.log") as raw_urls,
        child(["sink"], logs / "sink-server.log") as sink_urls,
        child(
            ["picobot", str(ctx.data_dir), sink_urls["http"]], logs / "picobot-server.log", profile
        ) as pico_urls,
    ):
        sides = (("raw_echo", raw_urls, False), ("picobot", pico_urls, True))
        runs: dict[str, dict[str, Any]] = {name: {} for name, _, _ in sides}
        for name, urls, is_pico in sides:
            ctx.progress(f"  websocket {name}: {clients} clients x {plan.ws_turns}, closed loop")
            runs[name]["capacity"] = await ws_load(
                urls["ws"], clients, plan.ws_turns, texts, picobot=is_pico
            )
        # Latency at a load PicoBot sustains: half its measured capacity.
        half = max(1.0, round(runs["picobot"]["capacity"]["turns_per_s"] / 2))
        for run, (key, offered) in enumerate((("paced", rate), ("paced_half_capacity", half)), 1):
            # Users of its own: the runs before added hundreds of messages to theirs,
            # which makes each turn's recall dearer (at 100k, capacity fell by a third
            # or more over six runs on the same users).
            fresh = (run + 1) * clients <= min(ctx.scale.users, KEYED_USERS)
            first = run * clients if fresh else 0
            texts = run_texts(ctx, first, clients)
            for name, urls, is_pico in sides:
                ctx.progress(f"  websocket {name}: paced at {offered:g} turns/s")
                runs[name][key] = await ws_load(
                    urls["ws"],
                    clients,
                    plan.ws_turns,
                    texts,
                    picobot=is_pico,
                    rate=offered,
                    first_user=first,
                )
        ctx.progress(f"  webhook: {plan.webhook_requests} signed POSTs each")
        hook_pico, hook_raw = await webhook_rtts(
            pico_urls["http"], raw_urls["http"], plan.webhook_requests, plan.warmup, texts
        )
    pico, echo = runs["picobot"], runs["raw_echo"]
    websocket = {
        "turns_per_s": pico["capacity"]["turns_per_s"],
        "p95_ms": pico["paced"]["latency_ms"]["p95"],
        "p50_ms": pico["paced"]["latency_ms"]["p50"],
        "paced_turns_per_s": pico["paced"]["turns_per_s"],
        "turns_per_s_ratio": ratio(
            pico["capacity"]["turns_per_s"], echo["capacity"]["turns_per_s"]
        ),
        "p95_ratio": ratio(pico["paced"]["latency_ms"]["p95"], echo["paced"]["latency_ms"]["p95"]),
        "half_capacity_turns_per_s": pico["paced_half_capacity"]["offered_turns_per_s"],
        "half_capacity_p95_ms": pico["paced_half_capacity"]["latency_ms"]["p95"],
        "half_capacity_p95_ratio": ratio(
            pico["paced_half_capacity"]["latency_ms"]["p95"],
            echo["paced_half_capacity"]["latency_ms"]["p95"],
        ),
        "picobot": pico,
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
