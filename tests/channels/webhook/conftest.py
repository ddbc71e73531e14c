"""Webhook fixtures: a real runtime, real HTTP servers on 127.0.0.1:0, a platform stand-in.

- ``runtime``: PicoBot assembled by ``open_runtime`` on a SQLite file under tmp_path,
  with the ScriptedProvider (``provider`` fixture; it echoes ``You said: <text>``).
- ``webhooks``: starts :class:`WebhookServer` instances for given platforms on their
  own aiohttp server (``await webhooks.start(platform)``), all stopped at teardown.
- ``platform_api``: a local aiohttp server standing in for a platform's API or a
  callback receiver: it records every request and answers 200 unless told to fail
  (``platform_api.fail(3, status=500)``).
- ``client``: an aiohttp client session for posting webhooks.
- ``generic``: the generic platform, replying to ``platform_api``'s ``/callback``;
  :func:`post_generic` signs and posts a message to it.
- :class:`FailsOnce`: a store whose first write of fetched messages fails.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from picobot.channels.webhook.base import Platform
from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.channels.webhook.server import WebhookServer
from picobot.config.channels import GenericWebhookSettings, WebhookSettings
from picobot.config.settings import DataSettings, Settings
from picobot.errors import StoreUnavailable
from picobot.llm.scripted import ScriptedProvider
from picobot.runtime import Runtime, open_runtime
from picobot.store.channels.webhooks import WebhookStore
from tests.channels.webhook.generic_client import SECRET, SIGNATURE_HEADER, signed_headers
from tests.channels.webhook.stand_in import serving


@dataclass(frozen=True)
class Received:
    """One request as the platform stand-in saw it."""

    method: str
    path: str
    headers: dict[str, str]
    query: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    """A planned answer of the stand-in: ``body`` as JSON, or bytes sent as they are."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


class PlatformAPI:
    """Records requests; answers planned replies in order, then ``success`` forever."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.plan: deque[Reply] = deque()
        self.success: Any = {"ok": True}
        """JSON body of a default 200 answer (a platform may expect a certain shape)."""
        self.base_url = ""
        self._changed = asyncio.Event()

    def url(self, path: str = "/callback") -> str:
        """Absolute URL of ``path`` on this server."""
        return self.base_url + path

    def fail(self, times: int, status: int = 500, headers: dict[str, str] | None = None) -> None:
        """Answer the next ``times`` requests with ``status`` (and ``headers``)."""
        for _ in range(times):
            self.plan.append(Reply(status, {"ok": False, "error": "planned"}, headers or {}))

    def reply(
        self, status: int = 200, body: Any = None, headers: dict[str, str] | None = None
    ) -> None:
        """Queue one specific answer."""
        self.plan.append(Reply(status, body, headers or {}))

    async def wait_requests(self, count: int) -> list[Received]:
        """Wait until at least ``count`` requests arrived; return them all."""
        while len(self.requests) < count:
            changed = self._changed
            await changed.wait()
        return list(self.requests)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(
            Received(request.method, request.path, dict(request.headers), dict(request.query), body)
        )
        self._changed.set()
        self._changed = asyncio.Event()
        reply = self.plan.popleft() if self.plan else Reply(200, self.success)
        if isinstance(reply.body, bytes):  # as it is, e.g. JSON too deep to encode
            headers = {"Content-Type": "application/json", **reply.headers}
            return web.Response(body=reply.body, status=reply.status, headers=headers)
        return web.json_response(reply.body, status=reply.status, headers=reply.headers)


@pytest.fixture
async def platform_api() -> AsyncIterator[PlatformAPI]:
    """A PlatformAPI on 127.0.0.1, any free port."""
    api = PlatformAPI()
    async with serving(api.handle) as base_url:
        api.base_url = base_url
        yield api


@pytest.fixture
def bot_settings(tmp_path: Path) -> Settings:
    """Settings with the database under tmp_path."""
    return Settings(data=DataSettings(dir=str(tmp_path / "data")))


@pytest.fixture
def provider() -> ScriptedProvider:
    """The model: echoes unless a test queues turns."""
    return ScriptedProvider()


@pytest.fixture
async def runtime(bot_settings: Settings, provider: ScriptedProvider) -> AsyncIterator[Runtime]:
    """PicoBot assembled on a real SQLite file."""
    async with open_runtime(bot_settings, provider=provider) as rt:
        yield rt


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client for posting webhooks."""
    async with aiohttp.ClientSession() as session:
        yield session


class FakeClock:
    """A wall clock that only moves when told to."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, secs: float) -> None:
        """Move time forward."""
        self.now += secs


@dataclass
class Running:
    """A started webhook server and the HTTP server it is mounted on."""

    server: WebhookServer
    http: TestServer
    store: WebhookStore
    runtime: Runtime

    def url(self, platform: str) -> str:
        """The webhook URL of a platform."""
        return str(self.http.make_url(f"/webhooks/{platform}"))

    async def stop(self) -> None:
        """Stop taking requests, then stop the workers (a restart starts a new one)."""
        await self.http.close()
        await self.server.close()


class Webhooks:
    """Starts webhook servers for tests; every one is stopped at teardown."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.running: list[Running] = []

    async def start(
        self,
        *platforms: Platform,
        runtime: Runtime | None = None,
        settings: WebhookSettings | None = None,
        run_workers: bool = True,
        clock: Any = time.time,
        store: WebhookStore | None = None,
        **kwargs: Any,
    ) -> Running:
        """A WebhookServer on 127.0.0.1:0; ``run_workers=False`` only accepts.

        Fast retries by default (10 ms backoff, 50 ms cap, 5 attempts); pass any
        WebhookServer keyword to change them.
        """
        rt = runtime or self.runtime
        store = store or WebhookStore(rt.db, clock=clock)
        options: dict[str, Any] = {
            "max_attempts": 5,
            "backoff_base_secs": 0.01,
            "backoff_cap_secs": 0.05,
            **kwargs,
        }
        server = WebhookServer(
            rt.kernel,
            platforms,
            settings or WebhookSettings(),
            store=store,
            supervisor=rt.tasks,
            clock=clock,
            **options,
        )
        app = web.Application()
        server.add_routes(app)
        http = TestServer(app, host="127.0.0.1", port=0)
        await http.start_server()
        if run_workers:
            await server.start()
        running = Running(server, http, store, rt)
        self.running.append(running)
        return running

    async def stop_all(self) -> None:
        for running in reversed(self.running):
            await running.stop()


@pytest.fixture
async def webhooks(runtime: Runtime) -> AsyncIterator[Webhooks]:
    """Start webhook servers over ``runtime`` (or another one) with ``await webhooks.start()``."""
    hooks = Webhooks(runtime)
    try:
        yield hooks
    finally:
        await hooks.stop_all()


VALID = "valid"
"""``signature=VALID`` (the default) signs the body correctly with SECRET."""


@pytest.fixture
def generic(platform_api: PlatformAPI) -> GenericPlatform:
    """The generic platform; replies go to ``platform_api`` at /callback."""
    settings = GenericWebhookSettings(enabled=True, callback_url=platform_api.url("/callback"))
    return GenericPlatform(settings, SECRET)


async def post_generic(
    client: aiohttp.ClientSession,
    url: str,
    payload: dict[str, Any] | bytes,
    *,
    signature: str | None = VALID,
    secret: str = SECRET,
    timestamp: float | str | None = None,
    legacy: bool = False,
) -> tuple[int, Any]:
    """POST a generic webhook body; return the status and the JSON answer.

    Signed as :func:`signed_headers` does (``timestamp`` defaults to now); a given
    ``signature`` replaces the valid one, None sends none.
    """
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = signed_headers(body, secret=secret, timestamp=timestamp, legacy=legacy)
    if signature is None:
        del headers[SIGNATURE_HEADER]
    elif signature != VALID:
        headers[SIGNATURE_HEADER] = signature
    async with client.post(url, data=body, headers=headers) as resp:
        return resp.status, await resp.json()


def message(text: str, message_id: str, *, user: str = "alice", chat: str = "c1") -> dict[str, Any]:
    """A generic webhook body."""
    return {"user": user, "chat": chat, "text": text, "message_id": message_id}


async def rows(runtime: Runtime, sql: str, *params: object) -> list[tuple[object, ...]]:
    """Every row of a query on the runtime's database, as tuples."""
    return [tuple(r) for r in await runtime.db.fetchall(sql, params)]


def texts(api: PlatformAPI) -> list[str]:
    """The texts the generic platform's stand-in API was sent, in order."""
    return [r.json()["text"] for r in api.requests]


class FailsOnce(WebhookStore):
    """A store whose first inbox write of fetched messages fails, like a locked disk."""

    def __init__(self, runtime: Runtime) -> None:
        super().__init__(runtime.db)
        self.failed = False

    async def accept_many(self, platform: str, messages: Any, **kw: Any) -> list[int | None]:
        if not self.failed:
            self.failed = True
            raise StoreUnavailable("database is locked")
        return await super().accept_many(platform, messages, **kw)


async def answer(store: WebhookStore, inbox_id: int, replies: list[str]) -> int:
    """Mark alice's inbox message of chat c1 processed with ``replies``; how many were
    queued."""
    return await store.mark_processed(
        inbox_id,
        replies,
        platform="generic",
        reply_to={"chat": "c1"},
        user_id="generic:alice",
        chat_id="c1",
    )
