"""Shared parts of the admin API tests: keys, users, a started API and a client,
and the test-side schema validator for responses."""

from __future__ import annotations

import json
import time
from contextlib import AsyncExitStack
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from picobot.admin.api import (
    AdminAPI,
    load_admin_keys,
)
from picobot.admin.openapi import OPENAPI
from picobot.config.settings import DataSettings, Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, Outbound
from picobot.runtime import Runtime, open_runtime

KEY_A = "admin-key-A-0123456789"
KEY_B = "other-key-B-0123456789"
WS_KEY = "chat-ws-key-0123456789"
ALICE = "telegram:42"
BOB = "whatsapp:15551234567@s.whatsapp.net"
DAY = 86_400.0


class FakeClock:
    """Wall-clock time that a test can move forward."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class Api:
    """A started admin API and a client for it."""

    def __init__(self, runtime: Runtime, client: TestClient[Any, Any], clock: FakeClock) -> None:
        self.runtime = runtime
        self.client = client
        self.clock = clock

    async def call(
        self,
        method: str,
        path: str,
        *,
        key: str | None = KEY_A,
        body: Any = None,
        raw: bytes | None = None,
        expect: int = 200,
        schema: str | None = None,
    ) -> Any:
        """Send a request; assert the status; return the JSON (checked against ``schema``)."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        async with self.client.request(method, path, headers=headers, data=data) as resp:
            text = await resp.text()
            assert resp.status == expect, f"{method} {path}: {resp.status} {text}"
            if resp.status == 204:
                assert text == ""
                return None
            assert resp.content_type == "application/json"
            payload = json.loads(text)
        if expect >= 400:
            validate(payload, ref("Error"))
        elif schema is not None:
            validate(payload, ref(schema))
        return payload

    async def chat(self, user: str, text: str, channel: str = "telegram") -> list[Outbound]:
        """One message from ``user`` through the kernel; the events it produced."""
        inbound = Inbound(Identity(channel, user, user), text)
        return [event async for event in self.runtime.kernel.handle(inbound)]


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def validate(value: Any, schema: dict[str, Any], where: str = "$") -> None:
    """The subset of JSON Schema the admin document uses; AssertionError on a mismatch."""
    if "$ref" in schema:
        schema = OPENAPI["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    if "oneOf" in schema:
        passed = 0
        for option in schema["oneOf"]:
            try:
                validate(value, option, where)
            except AssertionError:
                continue
            passed += 1
        assert passed == 1, f"{where}: {passed} oneOf options match {value!r}"
        return
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
    if "const" in schema:
        assert value == schema["const"], f"{where}: {value!r} != {schema['const']!r}"
    types = schema.get("type")
    if types is not None:
        kinds: dict[str, type | tuple[type, ...]] = {
            "string": str,
            "integer": int,
            "number": (int, float),
            "boolean": bool,
            "object": dict,
            "array": list,
            "null": type(None),
        }
        names = [types] if isinstance(types, str) else types
        ok = any(
            isinstance(value, kinds[n]) and not (n in ("integer", "number") and value is True)
            for n in names
        )
        ok = ok and not (isinstance(value, bool) and "boolean" not in names)
        assert ok, f"{where}: {value!r} is not {types}"
    if schema.get("format") == "date-time" and isinstance(value, str):
        datetime.fromisoformat(value)
    if isinstance(value, int) and "minimum" in schema:
        assert schema["minimum"] <= value <= schema.get("maximum", value)
    if isinstance(value, dict) and "properties" in schema:
        for name in schema.get("required", []):
            assert name in value, f"{where}: missing {name!r}"
        if schema.get("additionalProperties") is False:
            extra = set(value) - set(schema["properties"])
            assert not extra, f"{where}: undocumented {sorted(extra)}"
        for name, item in value.items():
            if name in schema["properties"]:
                validate(item, schema["properties"][name], f"{where}.{name}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            validate(item, schema["items"], f"{where}[{i}]")


def users(user: str) -> str:
    return "/api/v1/users/" + quote(user, safe="")


async def start(
    stack: AsyncExitStack,
    tmp_path: Path,
    clock: FakeClock,
    *,
    settings: Settings | None = None,
    **kwargs: Any,
) -> Api:
    settings = settings or Settings(data=DataSettings(dir=str(tmp_path)))
    runtime = await stack.enter_async_context(open_runtime(settings, provider=ScriptedProvider()))
    if "retention" in runtime.tasks.status():
        # The runtime's own retention job runs at start; let it finish so that its
        # record never races the assertions of a test.
        await runtime.tasks.job("retention").wait_runs(1)
    admin = AdminAPI(runtime, load_admin_keys(settings.server), clock=clock, **kwargs)
    app = web.Application()
    admin.add_routes(app)
    client: TestClient[Any, Any] = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await client.start_server()
    stack.push_async_callback(client.close)
    return Api(runtime, client, clock)
