"""chat_endpoint: the OpenAI-compatible endpoint's turn latency against the WebSocket channel's.

One ``picobot serve`` (a child process, as in :mod:`bench.net`) runs both channels on
the bench's working copy with an instant model. Each client is one corpus user with one
key, so both channels chat as the same user over the same history (each in its own
current session, as the endpoint keeps one per key): a WebSocket connection and one
kept-alive HTTP connection, as a chat front end holds. In each round a client takes
one turn over WebSocket (send, read to ``end``), one streamed request (read to ``data:
[DONE]``) and one whole request, in an order that rotates, so every side meets the same
load and the same growing history. The target is the streamed turn's p50 and p95 over
the WebSocket turn's; the whole answer is informational.

``python -m bench.chat_endpoint DATA_DIR`` is the server side.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection, connect

from bench.common import BenchContext, bench_settings
from bench.corpus import user_name
from bench.net import START_TIMEOUT, WARMUP_TURNS, child
from bench.provider import InstantProvider
from bench.server import KEYED_USERS, api_key, bench_replies
from bench.stats import dist_ms, now_ns, ratio

CLIENTS = 10
"""Concurrent clients: a busy server, far from its capacity (the websocket bench's
100 clients measure that)."""
FIRST_USER = 200
"""Corpus users the websocket bench's two runs (users 0-199) leave alone, if the corpus has them."""
SIDES = ("websocket", "openai_stream", "openai_whole")

Turn = Callable[[str], Awaitable[bool]]
"""One turn of one side; returns whether it ended in an error."""


async def _ws_turn(ws: ClientConnection, text: str) -> bool:
    await ws.send(json.dumps({"type": "chat", "text": text}))
    failed = False
    while True:
        got = await ws.recv()
        assert isinstance(got, str)
        if got.startswith('{"type":"end"'):
            return failed
        failed = failed or got.startswith('{"type":"error"')


class _HttpConnection:
    """A kept-alive HTTP/1.1 connection speaking just what the bench needs.

    A front end's HTTP client costs the bench process (which runs every client on one
    core) far more than the ``websockets`` client does; timed with it, the figure said
    more about aiohttp's client than about the endpoint. This one writes a request and
    reads the answer (``Content-Length`` or chunked) with a few stream calls.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self._path = parts.path
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, key: str, body: bytes) -> tuple[int, bytes]:
        """POST ``body`` as JSON; the status and the whole (de-chunked) answer."""
        if self._streams is None:
            self._streams = await asyncio.open_connection(self._host, self._port)
        reader, writer = self._streams
        writer.write(
            f"POST {self._path} HTTP/1.1\r\nHost: {self._host}\r\n"
            f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        headers = head.lower()
        if b"transfer-encoding: chunked" in headers:
            data = b""
            while size := int((await reader.readline()).strip(), 16):
                data += (await reader.readexactly(size + 2))[:-2]
            await reader.readline()
            return status, data
        length = int(headers.split(b"content-length:")[1].split(b"\r\n")[0])
        return status, await reader.readexactly(length)

    def close(self) -> None:
        """Close the connection."""
        if self._streams is not None:
            self._streams[1].close()


def _http_turn(http: _HttpConnection, key: str, *, stream: bool) -> Turn:
    async def turn(text: str) -> bool:
        body = {"model": "picobot", "messages": [{"role": "user", "content": text}]}
        status, data = await http.post(key, json.dumps({**body, "stream": stream}).encode())
        if status != 200:
            return True
        return stream and not data.endswith(b"data: [DONE]\n\n")

    return turn


async def _client(
    ws_url: str,
    chat_url: str,
    user: int,
    texts: list[str],
    samples: dict[str, list[int]],
    errors: list[int],
) -> None:
    key = api_key(user)
    async with contextlib.AsyncExitStack() as stack:
        ws = await stack.enter_async_context(
            connect(
                ws_url,
                additional_headers={"Authorization": f"Bearer {key}"},
                open_timeout=START_TIMEOUT,
            )
        )
        await ws.recv()  # hello
        # One kept-alive connection, as a front end's HTTP client holds.
        http = _HttpConnection(chat_url)
        stack.callback(http.close)
        turns: dict[str, Turn] = {
            "websocket": lambda text: _ws_turn(ws, text),
            "openai_stream": _http_turn(http, key, stream=True),
            "openai_whole": _http_turn(http, key, stream=False),
        }
        for k, text_group in enumerate(_groups(texts)):
            order = SIDES[k % 3 :] + SIDES[: k % 3]
            for side, text in zip(order, text_group, strict=True):
                start = now_ns()
                failed = await turns[side](text)
                elapsed = now_ns() - start
                errors.append(int(failed))
                if k >= WARMUP_TURNS:
                    samples[side].append(elapsed)


def _groups(texts: list[str]) -> list[list[str]]:
    return [texts[i : i + len(SIDES)] for i in range(0, len(texts), len(SIDES))]


async def chat_endpoint_overhead(ctx: BenchContext) -> dict[str, Any]:
    """Turn latency over the chat endpoint (streamed, whole) and WebSocket, same run."""
    clients = min(CLIENTS, ctx.plan.ws_clients, ctx.scale.users, KEYED_USERS)
    first = FIRST_USER if FIRST_USER + clients <= min(ctx.scale.users, KEYED_USERS) else 0
    rounds = WARMUP_TURNS + ctx.plan.ws_turns
    samples: dict[str, list[int]] = {side: [] for side in SIDES}
    errors: list[int] = []
    log = ctx.data_dir / "chat-endpoint-server.log"
    ctx.progress(f"  chat endpoint: {clients} clients x {ctx.plan.ws_turns} rounds of 3 turns")
    async with child([str(ctx.data_dir)], log, module="bench.chat_endpoint") as urls:
        chat_url = f"{urls['openai']}/chat/completions"
        await asyncio.gather(
            *(
                _client(
                    urls["ws"],
                    chat_url,
                    first + i,
                    ctx.gen.texts_for([first + i] * rounds * len(SIDES)),
                    samples,
                    errors,
                )
                for i in range(clients)
            )
        )
    ws, stream, whole = (dist_ms(samples[side]) for side in SIDES)
    return {
        "clients": clients,
        "websocket_ms": ws,
        "openai_stream_ms": stream,
        "openai_whole_ms": whole,
        "p50_ratio": ratio(stream["p50"], ws["p50"]),
        "p95_ratio": ratio(stream["p95"], ws["p95"]),
        "whole_p50_ratio": ratio(whole["p50"], ws["p50"]),
        "whole_p95_ratio": ratio(whole["p95"], ws["p95"]),
        "errors": sum(errors),
    }


async def _serve(data_dir: Path) -> None:
    """``serve`` with the WebSocket channel and the chat endpoint until SIGTERM."""
    from picobot.cli.serve import ServeInfo, serve

    os.environ["PICOBOT_WS_API_KEYS"] = ",".join(
        f"{api_key(i)}:{user_name(i)}" for i in range(KEYED_USERS)
    )
    unlimited = {"rate_limit_per_minute": 1_000_000}
    settings = bench_settings(
        data_dir,
        channels={
            "websocket": {"enabled": True, "port": 0, **unlimited, "max_connections_per_peer": 0},
            "openai": {"enabled": True, "port": 0, **unlimited},
        },
        server={
            "enable_admin_api": False,
            "shutdown_grace_secs": 2.0,
            "max_connections_per_peer": 0,
        },
    )

    def ready(info: ServeInfo) -> None:
        print(json.dumps({"ws": info.websocket_url, "openai": info.openai_url}), flush=True)

    await serve(settings, provider=InstantProvider(bench_replies()), ready=ready)


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    if len(sys.argv) != 2:
        print("usage: python -m bench.chat_endpoint DATA_DIR", file=sys.stderr)
        sys.exit(2)
    asyncio.run(_serve(Path(sys.argv[1])))
