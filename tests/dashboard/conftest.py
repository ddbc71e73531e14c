"""Fixtures of the dashboard tests: a real ``picobot serve`` process on loopback ports
(scripted model, real SQLite file), a chat client for it, the same database opened
from the test for seeding, and, for the browser tests, Debian's Chromium driven by
Playwright (never a downloaded browser). ``local`` serves the same dashboard and admin
API from the test's own process (a real aiohttp server on port 0, a real SQLite file,
two operator keys), for tests that read the log or the route table."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from websockets.asyncio.client import connect

from picobot.admin.api import AdminAPI
from picobot.config.settings import DataSettings, Settings
from picobot.dashboard.app import Dashboard
from picobot.llm.scripted import ScriptedProvider
from picobot.runtime import Runtime, open_database, open_runtime
from picobot.store.learned.fact_rules import observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.learned.facts import Fact
from tests.cli.test_serve import free_port, start_subprocess, stop_subprocess, wait_healthy

ADMIN_KEY = "dash-admin-key-0123456789"
OTHER_KEY = "other-operator-key-0123456789"
WS_KEY = "dash-ws-key-0123456789ab"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class Served:
    """A running ``picobot serve``: its URLs and data directory."""

    base: str
    ws_url: str
    data_dir: Path

    @property
    def settings(self) -> Settings:
        return Settings(data=DataSettings(dir=str(self.data_dir)))

    async def chat(self, text: str) -> str:
        """One chat turn over the WebSocket channel as ``ws:alice``; the reply (and notices)."""
        async with connect(self.ws_url, additional_headers={"x-api-key": WS_KEY}) as ws:
            json.loads(await ws.recv())  # hello
            await ws.send(json.dumps({"type": "chat", "text": text}))
            frames: list[dict[str, Any]] = []
            while not frames or frames[-1]["type"] != "end":
                frames.append(json.loads(await ws.recv()))
        return "".join(f.get("text", "") for f in frames if f["type"] in ("done", "notice"))

    async def add_fact(self, user: str, category: str, text: str, confidence: float) -> Fact:
        """A fact written through the store, from this process (as ``picobot facts create``)."""
        async with open_database(self.settings) as db:
            return await FactStore(db).create(
                user,
                observation(None, category, text),
                confidence=confidence,
                actor="cli:test",
                now=time.time(),
            )


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    http_port, ws_port = free_port(), free_port()
    data = tmp_path / "data"
    env = {
        **os.environ,
        "PICOBOT_DATA__DIR": str(data),
        "PICOBOT_LLM__PROVIDER": "scripted",
        "PICOBOT_SERVER__PORT": str(http_port),
        "PICOBOT_CHANNELS__WEBSOCKET__ENABLED": "true",
        "PICOBOT_CHANNELS__WEBSOCKET__PORT": str(ws_port),
        "PICOBOT_WS_API_KEYS": f"{WS_KEY}:alice",
        "PICOBOT_ADMIN_API_KEYS": ADMIN_KEY,
        # Tests fail logins on purpose; the limit has a test of its own.
        "PICOBOT_SERVER__ADMIN_AUTH_MAX_FAILURES": "50",
    }
    proc = start_subprocess(tmp_path, env)
    try:
        base = f"http://127.0.0.1:{http_port}"
        await wait_healthy(f"{base}/healthz", proc)
        yield Served(base, f"ws://127.0.0.1:{ws_port}/ws", data)
    finally:
        stderr = await stop_subprocess(proc)
    assert proc.returncode == 0, stderr
    # The key is never logged, and neither is a session token.
    assert ADMIN_KEY not in stderr


def http_session() -> aiohttp.ClientSession:
    """A client that keeps cookies of 127.0.0.1 (aiohttp's default jar drops IP hosts)."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def log_in(http: aiohttp.ClientSession, base: str, key: str = ADMIN_KEY) -> str:
    """Log in through the form; the CSRF token of the new login."""
    async with http.post(f"{base}/admin/login", data={"key": key}) as resp:
        assert resp.status == 200, await resp.text()
        assert str(resp.url).endswith("/admin/")
        found = CSRF.search(await resp.text())
    assert found is not None
    return found.group(1)


@dataclass
class Local:
    """The dashboard and admin API served from the test's process."""

    base: str
    runtime: Runtime
    app: web.Application
    dashboard: Dashboard
    admin: AdminAPI


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[Local]:
    settings = Settings(data=DataSettings(dir=str(tmp_path / "data")))
    async with open_runtime(settings, provider=ScriptedProvider()) as runtime:
        if "retention" in runtime.tasks.status():
            # Its first run records a task run; let it finish before a test counts rows.
            await runtime.tasks.job("retention").wait_runs(1)
        admin = AdminAPI(runtime, [ADMIN_KEY, OTHER_KEY])
        dashboard = Dashboard(runtime, admin)
        app = web.Application()
        admin.add_routes(app)
        dashboard.add_routes(app)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            yield Local(f"http://127.0.0.1:{port}", runtime, app, dashboard, admin)
        finally:
            await runner.cleanup()


@functools.cache
def chromium_missing(chromium: Path = CHROMIUM) -> str | None:
    """Why ``chromium`` cannot run the browser tests, or None when it can.

    It must exist and answer ``--version``: a snap wrapper without snapd, or a broken
    install, makes the browser tests skip with the reason instead of failing them."""
    fix = "install Debian's package (apt-get install chromium) to run the browser tests"
    if not chromium.is_file():
        return f"no Chromium at {chromium}: {fix}"
    try:
        done = subprocess.run(  # noqa: S603 - a fixed path, no shell
            [str(chromium), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{chromium} --version did not run ({exc}): {fix}"
    if done.returncode != 0 or "chromium" not in done.stdout.lower():
        said = (done.stdout + done.stderr).strip().splitlines()[:1] or ["no output"]
        return f"{chromium} --version failed (exit {done.returncode}: {said[0][:200]}): {fix}"
    return None


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[Any]:
    """A fresh headless Chromium (its own profile directory) as a Playwright context."""
    missing = chromium_missing()
    if missing is not None:
        pytest.skip(missing)
    from playwright.async_api import async_playwright, expect

    # A loaded CI machine can be slow to draw; an assertion still fails, only later.
    expect.set_options(timeout=15_000)
    async with async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            await context.close()
