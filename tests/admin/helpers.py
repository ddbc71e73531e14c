"""Shared parts of the admin API tests: keys, users, a started API and a client that
checks every answer against the served OpenAPI document."""

from __future__ import annotations

import json
import re
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from jsonschema import Draft202012Validator

from picobot.admin.api import (
    AdminAPI,
    load_admin_keys,
)
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


class Contract:
    """The served OpenAPI document as a checker of answers (a real JSON Schema validator).

    Every answer is looked up by method, path template and status: an undocumented
    status or media type fails, and a JSON body must match the documented schema,
    ``date-time`` formats included.
    """

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self._templates = [
            (re.compile("^" + re.sub(r"\{[^/]+\}", "[^/]+", path) + "$"), path)
            for path in document["paths"]
        ]

    def operation(self, method: str, path: str) -> dict[str, Any]:
        """The documented operation that serves ``method path``."""
        bare = path.split("?", 1)[0]
        found = [template for pattern, template in self._templates if pattern.match(bare)]
        assert len(found) == 1, f"{method} {bare}: documented as {found}"
        operation: dict[str, Any] = self.document["paths"][found[0]][method.lower()]
        return operation

    def check(self, method: str, path: str, status: int, media_type: str, body: Any) -> None:
        """Assert that the answer is what the document promises for ``method path``."""
        replies = self.operation(method, path)["responses"]
        assert str(status) in replies, f"{method} {path}: {status} is not documented"
        content = replies[str(status)].get("content")
        if content is None:
            assert body is None, f"{method} {path}: {status} has no documented body"
            return
        documented = {name.split(";")[0].strip(): spec for name, spec in content.items()}
        assert media_type in documented, f"{method} {path}: {media_type} not documented"
        schema = documented[media_type].get("schema")
        if schema is not None and media_type == "application/json":
            self.validator(schema).validate(body)

    def validator(self, schema: dict[str, Any]) -> Draft202012Validator:
        """A validator of ``schema`` whose $refs resolve in the document's components."""
        root = {**schema, "components": self.document["components"]}
        return Draft202012Validator(root, format_checker=Draft202012Validator.FORMAT_CHECKER)

    def schema(self, name: str) -> Draft202012Validator:
        """A validator of the component schema ``name``."""
        return self.validator({"$ref": f"#/components/schemas/{name}"})


class Api:
    """A started admin API, a client for it, and the document it serves."""

    def __init__(
        self,
        runtime: Runtime,
        client: TestClient[Any, Any],
        clock: FakeClock,
        contract: Contract,
    ) -> None:
        self.runtime = runtime
        self.client = client
        self.clock = clock
        self.contract = contract

    async def call(
        self,
        method: str,
        path: str,
        *,
        key: str | None = KEY_A,
        body: Any = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        expect: int = 200,
    ) -> Any:
        """Send a request; assert the status and the documented shape; return the JSON."""
        sent = {"Authorization": f"Bearer {key}"} if key else {}
        sent.update(headers or {})
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        async with self.client.request(method, path, headers=sent, data=data) as resp:
            text = await resp.text()
            assert resp.status == expect, f"{method} {path}: {resp.status} {text}"
            payload = None if resp.status == 204 else json.loads(text)
            if resp.status == 204:
                assert text == ""
            else:
                assert resp.content_type == "application/json"
            self.contract.check(method, path, resp.status, resp.content_type, payload)
        return payload

    async def chat(self, user: str, text: str, channel: str = "telegram") -> list[Outbound]:
        """One message from ``user`` through the kernel; the events it produced."""
        inbound = Inbound(Identity(channel, user, user), text)
        return [event async for event in self.runtime.kernel.handle(inbound)]


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
    # The services (pending purges, fact edits) keep the runtime's time.
    runtime.kernel.clock = clock
    admin = AdminAPI(runtime, load_admin_keys(settings.server), clock=clock, **kwargs)
    app = web.Application()
    admin.add_routes(app)
    client: TestClient[Any, Any] = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await client.start_server()
    stack.push_async_callback(client.close)
    # Answers are checked against what the server says about itself, not a copy.
    async with client.get("/api/v1/openapi.json", headers={"X-API-Key": KEY_A}) as resp:
        assert resp.status == 200
        document = await resp.json()
    return Api(runtime, client, clock, Contract(document))
