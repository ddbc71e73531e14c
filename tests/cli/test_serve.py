"""End to end: ``picobot serve`` as a subprocess with every channel kind enabled.

A real process on loopback ports: WebSocket chat, a signed generic webhook whose reply
reaches a local callback server, the admin API seeing both users, and a clean exit 0
on SIGTERM. And, in process, what ``serve`` does to the garbage collector.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake

from picobot.cli.serve import ServeInfo, serve
from picobot.config.settings import DataSettings, Settings
from picobot.llm.base import LLMProvider
from picobot.llm.scripted import ScriptedProvider
from tests.channels.gated import GatedProvider
from tests.channels.webhook.generic_client import signed_headers

WS_KEY = "ws-key-0123456789abcdef"
ADMIN_KEY = "admin-key-0123456789abcdef"
SECRET = "generic-secret-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def callback() -> AsyncIterator[tuple[str, list[dict[str, Any]], asyncio.Event]]:
    """A local receiver for the generic webhook's replies."""
    received: list[dict[str, Any]] = []
    got = asyncio.Event()

    async def handle(request: web.Request) -> web.Response:
        received.append(await request.json())
        got.set()
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/replies", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}/replies", received, got
    await runner.cleanup()


async def wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(300):  # bounded: 30 s at most
            assert proc.poll() is None, "picobot serve exited early"
            try:
                async with http.get(url) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("picobot serve never became healthy")


def start_subprocess(tmp_path: Path, env: dict[str, str], **popen: Any) -> subprocess.Popen[bytes]:
    """``picobot serve`` as a child in ``tmp_path`` with ``env``; stderr piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "picobot", "serve"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        **popen,
    )


async def stop_subprocess(proc: subprocess.Popen[bytes]) -> str:
    """SIGTERM ``proc`` and wait for it (killed after 30 s); what it wrote to stderr."""
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = await asyncio.to_thread(proc.communicate, None, 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return err.decode()


async def test_serve_subprocess_end_to_end(
    tmp_path: Path, callback: tuple[str, list[dict[str, Any]], asyncio.Event]
) -> None:
    callback_url, received, got = callback
    http_port, ws_port = free_port(), free_port()
    env = {
        **os.environ,
        "PICOBOT_DATA__DIR": str(tmp_path / "data"),
        "PICOBOT_LLM__PROVIDER": "scripted",
        "PICOBOT_SERVER__PORT": str(http_port),
        "PICOBOT_CHANNELS__WEBSOCKET__ENABLED": "true",
        "PICOBOT_CHANNELS__WEBSOCKET__PORT": str(ws_port),
        "PICOBOT_WS_API_KEYS": f"{WS_KEY}:alice",
        "PICOBOT_ADMIN_API_KEYS": ADMIN_KEY,
        "PICOBOT_CHANNELS__WEBHOOK__GENERIC__ENABLED": "true",
        "PICOBOT_CHANNELS__WEBHOOK__GENERIC__CALLBACK_URL": callback_url,
        "PICOBOT_GENERIC_WEBHOOK_SECRET": SECRET,
    }
    proc = start_subprocess(tmp_path, env)
    try:
        base = f"http://127.0.0.1:{http_port}"
        await wait_healthy(f"{base}/healthz", proc)

        async with connect(
            f"ws://127.0.0.1:{ws_port}/ws", additional_headers={"x-api-key": WS_KEY}
        ) as ws:
            hello = json.loads(await ws.recv())
            assert hello["user_id"] == "ws:alice"
            await ws.send(json.dumps({"type": "chat", "text": "hello over websocket"}))
            frames = []
            while not frames or frames[-1]["type"] != "end":
                frames.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
            done = [f for f in frames if f["type"] == "done"]
            assert done and done[0]["text"] == "You said: hello over websocket"

        body = json.dumps(
            {"user": "bob", "chat": "c1", "text": "hello over webhook", "message_id": "m-1"}
        ).encode()
        async with aiohttp.ClientSession() as http:
            headers = signed_headers(body, secret=SECRET)
            async with http.post(f"{base}/webhooks/generic", data=body, headers=headers) as r:
                assert r.status == 200
            async with http.post(f"{base}/webhooks/generic", data=body) as r:
                assert r.status == 401  # unsigned
            await asyncio.wait_for(got.wait(), 10)
            assert received[0]["text"] == "You said: hello over webhook"
            assert received[0]["in_reply_to"] == "m-1"

            auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
            async with http.get(f"{base}/api/v1/sessions", headers=auth) as r:
                users = {s["user_id"] for s in (await r.json())["sessions"]}
            assert users == {"ws:alice", "generic:bob"}
            async with http.get(f"{base}/api/v1/sessions") as r:
                assert r.status == 401
    finally:
        stderr = await stop_subprocess(proc)
    assert proc.returncode == 0, stderr
    assert "stopped" in stderr
    assert WS_KEY not in stderr and ADMIN_KEY not in stderr and SECRET not in stderr


async def test_objects_made_at_start_up_are_frozen_while_serving(tmp_path: Path) -> None:
    """Full garbage collections skip what start-up made while the server runs (they
    walked it all, holding the GIL, every few seconds under load); stopping thaws it."""
    settings = Settings(data=DataSettings(dir=str(tmp_path / "data")))
    stop = asyncio.Event()
    frozen_while_serving: list[int] = []

    def ready(info: ServeInfo) -> None:
        frozen_while_serving.append(gc.get_freeze_count())
        stop.set()

    assert await serve(settings, provider=ScriptedProvider(), stop=stop, ready=ready) == 0
    # The runtime, the settings and every module loaded so far.
    assert frozen_while_serving and frozen_while_serving[0] > 10_000
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("webhook", [False, True])
@pytest.mark.parametrize(
    ("enabled", "keys", "reason"),
    [
        (False, ADMIN_KEY, "the admin API is disabled ([server] enable_admin_api = false)"),
        (True, "", "the admin API is off: no keys in $PICOBOT_ADMIN_API_KEYS"),
    ],
)
async def test_serve_says_why_the_admin_api_is_off(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    webhook: bool,
    enabled: bool,
    keys: str,
    reason: str,
) -> None:
    # Keys set but the API switched off is not "no admin API key".
    monkeypatch.setenv("PICOBOT_ADMIN_API_KEYS", keys)
    monkeypatch.setenv("PICOBOT_SERVER__ENABLE_ADMIN_API", str(enabled).lower())
    monkeypatch.setenv("PICOBOT_SERVER__PORT", "0")
    monkeypatch.setenv("PICOBOT_DATA__DIR", str(tmp_path / "data"))
    if webhook:
        monkeypatch.setenv("PICOBOT_CHANNELS__WEBHOOK__GENERIC__ENABLED", "true")
        monkeypatch.setenv(
            "PICOBOT_CHANNELS__WEBHOOK__GENERIC__CALLBACK_URL", "http://127.0.0.1:9/"
        )
        monkeypatch.setenv("PICOBOT_GENERIC_WEBHOOK_SECRET", SECRET)
    stop = asyncio.Event()
    seen: list[ServeInfo] = []

    def ready(info: ServeInfo) -> None:
        seen.append(info)
        stop.set()

    with caplog.at_level("INFO", logger="picobot.cli.serve"):
        assert await serve(Settings(), provider=ScriptedProvider(), stop=stop, ready=ready) == 0
    assert not seen[0].admin_api
    messages = [r.getMessage() for r in caplog.records if r.name == "picobot.cli.serve"]
    assert any(reason in m for m in messages), messages
    if enabled is False:
        assert not any("no admin API key" in m for m in messages), messages
    assert (seen[0].http_url is not None) == webhook


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


async def serve_while(
    use: Callable[[ServeInfo, asyncio.Event], Awaitable[None]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    env: dict[str, str],
    provider: LLMProvider | None = None,
) -> None:
    """Serve with the WebSocket channel and ``env`` until ``use(info, stop)`` is done."""
    for key, value in {
        "PICOBOT_DATA__DIR": str(tmp_path / "data"),
        "PICOBOT_SERVER__PORT": "0",
        "PICOBOT_CHANNELS__WEBSOCKET__ENABLED": "true",
        "PICOBOT_CHANNELS__WEBSOCKET__PORT": "0",
        "PICOBOT_WS_API_KEYS": f"{WS_KEY}:alice",
        **env,
    }.items():
        monkeypatch.setenv(key, value)
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    async def run(info: ServeInfo) -> None:
        try:
            await use(info, stop)
        finally:
            stop.set()

    def ready(info: ServeInfo) -> None:
        tasks.append(asyncio.create_task(run(info)))

    model = provider or ScriptedProvider()
    async with asyncio.timeout(120):  # a stuck server fails the test instead of hanging it
        assert await serve(Settings(), provider=model, stop=stop, ready=ready) == 0
        await asyncio.gather(*tasks)


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback on this machine")
async def test_banner_urls_of_an_ipv6_host_are_bracketed_and_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``ws://::1:8765/ws`` is no URL a client can use: an IPv6 host goes in brackets."""
    used: list[tuple[object, str]] = []

    async def use(info: ServeInfo, stop: asyncio.Event) -> None:
        assert info.http_url is not None and info.websocket_url is not None
        async with aiohttp.ClientSession() as http, http.get(f"{info.http_url}/healthz") as r:
            used.append((r.status, info.http_url))
        headers = {"x-api-key": WS_KEY}
        async with connect(info.websocket_url, additional_headers=headers) as ws:
            used.append((json.loads(await ws.recv())["type"], info.websocket_url))

    env = {
        "PICOBOT_SERVER__HOST": "::1",
        "PICOBOT_CHANNELS__WEBSOCKET__HOST": "::1",
        "PICOBOT_ADMIN_API_KEYS": ADMIN_KEY,
    }
    with caplog.at_level("INFO", logger="picobot.cli.serve"):
        await serve_while(use, monkeypatch, tmp_path, env)
    (status, http_url), (greeting, ws_url) = used
    assert (status, greeting) == (200, "hello")
    assert http_url.startswith("http://[::1]:") and ws_url.startswith("ws://[::1]:")
    banner = [r.getMessage() for r in caplog.records if r.name == "picobot.cli.serve"]
    assert f"WebSocket chat: {ws_url}" in banner
    assert any(line.startswith(f"admin API: {http_url}/api/v1") for line in banner), banner


async def test_on_stop_every_channel_stops_accepting_before_turns_drain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A webhook turn still running must not keep the WebSocket channel open for new
    clients (before, it took them until the webhook turns were done, then gave the
    WebSocket turns a grace period of their own)."""
    provider = GatedProvider()
    late_client: list[str] = []

    async def stop_during_a_webhook_turn(info: ServeInfo, stop: asyncio.Event) -> None:
        assert info.http_url is not None and info.websocket_url is not None
        try:
            body = json.dumps({"user": "bob", "chat": "c", "text": "hi", "message_id": "1"})
            headers = signed_headers(body.encode(), secret=SECRET)
            async with aiohttp.ClientSession() as http:
                url = f"{info.http_url}/webhooks/generic"
                async with http.post(url, data=body, headers=headers) as r:
                    assert r.status == 200
                async with asyncio.timeout(60):  # a turn that never starts fails, not hangs
                    await provider.entered.wait()
                stop.set()
                await wait_closed(http, f"{info.http_url}/healthz")
            try:
                async with connect(info.websocket_url, additional_headers={"x-api-key": WS_KEY}):
                    late_client.append("connected")
            except (OSError, InvalidHandshake):
                late_client.append("refused")
        finally:
            provider.gate.set()

    env = {
        "PICOBOT_SERVER__SHUTDOWN_GRACE_SECS": "60",
        "PICOBOT_CHANNELS__WEBHOOK__GENERIC__ENABLED": "true",
        "PICOBOT_CHANNELS__WEBHOOK__GENERIC__CALLBACK_URL": "http://127.0.0.1:9/",
        "PICOBOT_GENERIC_WEBHOOK_SECRET": SECRET,
    }
    await serve_while(stop_during_a_webhook_turn, monkeypatch, tmp_path, env, provider)
    assert late_client == ["refused"]


async def wait_closed(http: aiohttp.ClientSession, url: str) -> None:
    """Wait until ``url`` refuses connections (bounded: 30 s at most)."""
    for _ in range(300):
        try:
            async with http.get(url):
                pass
        except aiohttp.ClientConnectionError:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{url} still answers")


async def test_shutdown_ends_an_open_event_stream_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client listening to the admin event stream must not hold serve's shutdown: the
    stream ends, completely (its last chunk sent), as serve stops."""
    lines: list[bytes] = []

    async def listen_then_stop(info: ServeInfo, stop: asyncio.Event) -> None:
        assert info.http_url is not None
        url = f"{info.http_url}/api/v1/events/stream"
        async with (
            aiohttp.ClientSession() as http,
            http.get(url, headers={"X-API-Key": ADMIN_KEY}) as resp,
        ):
            assert resp.status == 200
            lines.append(await resp.content.readline())
            stop.set()
            # Read to the end: a stream cut off by force would raise here instead.
            lines.extend([line async for line in resp.content])

    env = {"PICOBOT_ADMIN_API_KEYS": ADMIN_KEY}
    await serve_while(listen_then_stop, monkeypatch, tmp_path, env)
    assert lines[0] == b": stream open\n"
