"""The server side of the network benches, run as a child process.

``python -m bench.server picobot DATA_DIR CALLBACK_URL``: ``picobot.cli.serve.serve`` on
the corpus copy in DATA_DIR with the WebSocket channel (API keys for corpus users
0-299, :data:`KEYED_USERS`) and the generic signed webhook, whose replies go to CALLBACK_URL; an
instant model. A fourth argument ``no-background`` switches summaries and learning off.

``python -m bench.server raw``: the baselines, a plain ``websockets`` echo server and a
plain aiohttp POST handler.

``python -m bench.server sink``: where the webhook's replies go (``{"http": URL}``), in
a process of its own, as a platform's API is not in PicoBot's process either.

Each prints one JSON line ``{"ws": URL, "http": URL}`` on stdout when it listens and
runs until SIGTERM. With ``BENCH_PROFILE=FILE`` the process runs under cProfile and
writes the hottest functions to FILE on exit.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import json
import logging
import os
import pstats
import signal
import sys
from pathlib import Path

from aiohttp import web
from websockets.asyncio.server import ServerConnection, serve

from bench.common import bench_settings
from bench.corpus import TextGen, user_name
from bench.provider import InstantProvider

KEYED_USERS = 300
"""Corpus users with a WebSocket key: up to three runs of 100 clients (``bench.ceiling``;
the websocket bench makes two), each on users of its own."""
WEBHOOK_SECRET = "bench-webhook-secret-0123456789"  # noqa: S105 - a loopback-only test secret
SIGNATURE_HEADER = "X-PicoBot-Signature"
TIMESTAMP_HEADER = "X-PicoBot-Timestamp"


def bench_replies() -> list[str]:
    """The instant model's replies in every WebSocket server of the benches, in order:
    PicoBot's (:class:`bench.provider.InstantProvider`) and the bare-SQL server's, so
    the histories both build match and a returning user's recall reads alike."""
    return TextGen(7, stream=99).texts(97)


def api_key(index: int) -> str:
    """The WebSocket API key of corpus user ``index`` (:func:`bench.corpus.user_name`)."""
    return f"bench-key-{index:010d}"


def _announce(ws_url: str | None, http_url: str | None) -> None:
    print(json.dumps({"ws": ws_url, "http": http_url}), flush=True)


async def _accept(request: web.Request) -> web.Response:
    """Read the body, answer 200: the raw webhook baseline, and the reply sink."""
    await request.read()
    return web.json_response({"ok": True})


async def _listen(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, int(runner.addresses[0][1])


async def _until_sigterm() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()


async def run_sink() -> None:
    """Where the generic webhook delivers replies, in a process of its own as a
    platform's API would be: accepts and forgets them."""
    app = web.Application()
    app.add_routes([web.post("/callback", _accept)])
    runner, port = await _listen(app)
    _announce(None, f"http://127.0.0.1:{port}/callback")
    await _until_sigterm()
    await runner.cleanup()


QUIET = "no-background"
"""``bench.server picobot DATA_DIR CALLBACK no-background``: summaries and learning off."""


async def run_picobot(data_dir: Path, callback: str, *, background: bool = True) -> None:
    """``serve`` on the corpus copy until SIGTERM; webhook replies go to ``callback``.

    ``background=False`` switches off the work a long session starts beside its turns
    (summarizing it, learning facts, reflecting), which the bare-SQL server has no
    counterpart for: what is left is the turn path alone, recall included.
    """
    from picobot.cli.serve import ServeInfo
    from picobot.cli.serve import serve as picobot_serve

    os.environ["PICOBOT_WS_API_KEYS"] = ",".join(
        f"{api_key(i)}:{user_name(i)}" for i in range(KEYED_USERS)
    )
    os.environ["PICOBOT_GENERIC_WEBHOOK_SECRET"] = WEBHOOK_SECRET
    settings = bench_settings(
        data_dir,
        channels={
            "websocket": {
                "enabled": True,
                "port": 0,
                # 100 clients in closed loops send far more than a person would.
                "rate_limit_per_minute": 1_000_000,
                # Every bench client connects from 127.0.0.1: no per-address cap (the
                # default, 32, refused the 33rd of the 100 clients with a 503).
                "max_connections_per_peer": 0,
            },
            "webhook": {"generic": {"enabled": True, "callback_url": callback}},
        },
        server={"port": 0, "enable_admin_api": False, "shutdown_grace_secs": 2.0},
        **(
            {}
            if background
            else {
                "memory": {"learning": {"enabled": False}},
                "session": {"memory": {"enable_summarization": False}},
            }
        ),
    )
    replies = bench_replies()

    def ready(info: ServeInfo) -> None:
        _announce(info.websocket_url, info.http_url)

    await picobot_serve(settings, provider=InstantProvider(replies), ready=ready)


async def run_raw() -> None:
    """A websockets echo server and an aiohttp POST handler until SIGTERM."""

    async def echo(ws: ServerConnection) -> None:
        async for frame in ws:
            await ws.send(frame)

    app = web.Application()
    app.add_routes([web.post("/webhooks/generic", _accept)])
    runner, http_port = await _listen(app)
    async with serve(echo, "127.0.0.1", 0) as server:
        ws_port = server.sockets[0].getsockname()[1]
        _announce(f"ws://127.0.0.1:{ws_port}/ws", f"http://127.0.0.1:{http_port}")
        await _until_sigterm()
    await runner.cleanup()


def main(argv: list[str]) -> int:
    """Entry point of the child process."""
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    mode = argv[0] if argv else ""
    if mode == "picobot" and (len(argv) == 3 or argv[3:] == [QUIET]):
        work = run_picobot(Path(argv[1]), argv[2], background=len(argv) == 3)
    elif mode == "raw":
        work = run_raw()
    elif mode == "sink":
        work = run_sink()
    else:
        print(
            "usage: python -m bench.server"
            " picobot DATA_DIR CALLBACK_URL [no-background] | raw | sink",
            file=sys.stderr,
        )
        return 2
    profile_to = os.environ.get("BENCH_PROFILE")
    if not profile_to:
        asyncio.run(work)
        return 0
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        asyncio.run(work)
    finally:
        profiler.disable()
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("tottime").print_stats(40)
        stats.sort_stats("cumulative").print_stats(60)
        Path(profile_to).write_text(text.getvalue(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
