"""An admin API on a real aiohttp server (127.0.0.1:0) over a real runtime and SQLite file,
for the tests of its guards (auth limit, readiness)."""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from picobot.admin.api import AdminAPI, load_admin_keys
from picobot.config.channels import ServerSettings
from picobot.config.settings import DataSettings, Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.runtime import Runtime, open_runtime

KEY = "admin-key-A-0123456789"


class MovableClock:
    """Wall-clock time that a test moves forward."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def serve_admin(
    stack: AsyncExitStack, tmp_path: Path, server: ServerSettings, clock: MovableClock
) -> tuple[Runtime, TestClient[Any, Any]]:
    """Start the admin API with ``server`` settings and the key :data:`KEY`."""
    settings = Settings(data=DataSettings(dir=str(tmp_path / "data")), server=server)
    runtime = await stack.enter_async_context(open_runtime(settings, provider=ScriptedProvider()))
    admin = AdminAPI(
        runtime, load_admin_keys(server, {server.admin_api_keys_env: KEY}), clock=clock
    )
    app = web.Application()
    admin.add_routes(app)
    client: TestClient[Any, Any] = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await client.start_server()
    stack.push_async_callback(client.close)
    return runtime, client
