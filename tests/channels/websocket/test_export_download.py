"""/export over WebSocket: a single-use, expiring download token for GET /export/<token>,
on a real server on 127.0.0.1:0 with the real websockets client and aiohttp."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp

from picobot.channels.websocket.server import WebSocketChannel
from picobot.config.channels import WebSocketSettings
from picobot.config.settings import DataSettings, Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.runtime import open_runtime
from tests.channels.websocket.test_server import KEY_A, KEY_B, USER_A, Server, chat


async def served(stack: AsyncExitStack, tmp_path: Path) -> Server:
    runtime = await stack.enter_async_context(
        open_runtime(
            Settings(data=DataSettings(dir=str(tmp_path))), provider=ScriptedProvider(["ok"] * 9)
        )
    )
    channel = await stack.enter_async_context(
        WebSocketChannel(
            runtime.kernel,
            WebSocketSettings(enabled=True, port=0),
            export=runtime.services.export,
        )
    )
    return Server(runtime, channel)


def link(frames: list[dict[str, object]]) -> str:
    text = str(next(f for f in frames if f["type"] == "notice")["text"])
    return "/export/" + text.split("/export/")[1].split()[0]


async def test_the_token_downloads_the_callers_export_once(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        server = await served(stack, tmp_path)
        alice, _ = await server.client(KEY_A)
        bob, _ = await server.client(KEY_B)
        await chat(alice, "alice's secret recipe")
        await chat(bob, "bob's words")
        path = link(await chat(alice, "/export"))
        base = f"http://127.0.0.1:{server.channel.port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(base + path) as resp:  # no API key
                assert resp.status == 200
                assert resp.content_type == "application/x-ndjson"
                assert resp.headers["Cache-Control"] == "no-store"
                records = [json.loads(line) for line in (await resp.text()).splitlines()]
            assert records[0]["type"] == "export_header" and records[0]["user_id"] == USER_A
            texts = [r["content"] for r in records if r["type"] == "message"]
            assert "alice's secret recipe" in texts and "bob's words" not in texts
            async with http.get(base + path) as again:
                assert again.status == 404  # single use
            async with http.get(base + "/export/guessed-token") as guessed:
                assert guessed.status == 404


async def test_an_expired_token_downloads_nothing(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        server = await served(stack, tmp_path)
        now = [1000.0]
        server.runtime.services.export.tokens.clock = lambda: now[0]
        alice, _ = await server.client(KEY_A)
        await chat(alice, "hello")
        path = link(await chat(alice, "/export"))
        now[0] += 601  # past the ten minutes
        url = f"http://127.0.0.1:{server.channel.port}{path}"
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            assert resp.status == 404
