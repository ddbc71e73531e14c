"""Two ``picobot serve`` instances on one store, behind a small proxy.

Real: both servers are ``python -m picobot serve`` processes on the same SQLite file
(one data directory), or on one PostgreSQL database (a data directory each, one master
key),
their model is a remote one speaking OpenAI's chat completions protocol (served by this
test, which reads the prompts off the wire), the proxy is a TCP relay in this test
(round robin over the instances, the next one when a connection is refused, as a load
balancer does), the clients speak WebSocket and signed webhooks over loopback, and one
instance is killed with SIGKILL under load.
Asserted: while both run, each webhook message is answered exactly once although both
instances accept them; a user's history is one across instances (what the user said
and noted on A is in B's prompt, also after B served that user before), while the
generic webhook's user of the same name is someone else; a purge asked on one
instance is confirmed on the other (a webhook chat's "y", an admin API token) and taken
once; after the kill every
acknowledged message is in the file, the clients go on through the proxy on the
survivor (sending again the one message each had in flight), and every acknowledged
webhook message is answered, those the dead instance had claimed once its claims
expired.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import secrets
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import psycopg
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from picobot.store.channels.webhooks import CLAIM_SECS
from picobot.store.keys.sealing import Sealer
from picobot.store.postgres.driver import PgConnection
from picobot.store.postgres.keyring import PostgresKeyRing
from tests.channels.webhook.generic_client import signed_headers
from tests.llm.conftest import FakeLLMServer, serving

from .conftest import SAFETY, integrity, user_texts
from .crash_harness import ADMIN_KEY, SECRET, Callback, Serve, ws_key

CLIENTS = 4
HOOKS = 40
HISTORY_CLIENT = CLIENTS
"""The WebSocket key of the history check, one the load does not use."""


OK_STREAM = [
    {"object": "chat.completion.chunk", "choices": [{"index": 0, **choice}]}
    for choice in (
        {"delta": {"role": "assistant", "content": "ok"}, "finish_reason": None},
        {"delta": {}, "finish_reason": "stop"},
    )
]
"""The model's answer to every request, streamed: "ok"."""


@pytest.fixture
async def model() -> AsyncIterator[FakeLLMServer]:
    """A remote model on the OpenAI chat completions wire protocol, on a loopback port:
    it answers every request "ok" and keeps each request, to see what an instance sent."""
    async with serving(FakeLLMServer()) as fake:
        fake.reply(fake.sse([*OK_STREAM, "[DONE]"]))
        yield fake


def prompt_of(model: FakeLLMServer, text: str) -> str:
    """Every message of the one prompt whose last user message holds ``text``, joined."""
    prompts = [r.body["messages"] for r in model.requests if r.path.endswith("/completions")]
    found = [p for p in prompts if text in str([m for m in p if m.get("role") == "user"][-1:])]
    assert len(found) == 1, (text, len(found))
    return "\n".join(str(m.get("content")) for m in found[0])


MASTER_KEY = base64.b64encode(secrets.token_bytes(32)).decode()
"""The master key every PostgreSQL instance is given (instances on other machines)."""


@dataclass
class Store:
    """Where the instances keep their data: one SQLite file in a shared data directory,
    or one PostgreSQL database (each instance with a data directory of its own)."""

    url: str | None

    def env(self, tmp_path: Path, name: str) -> dict[str, str]:
        if self.url is None:
            return {}
        return {
            "PICOBOT_STORE__URL": self.url,
            "PICOBOT_DATA__DIR": str(tmp_path / f"data-{name}"),
            "PICOBOT_MASTER_KEY": MASTER_KEY,
        }

    def user_texts(self, db_path: Path) -> list[str]:
        """Every stored user message, in id order (duplicates kept)."""
        if self.url is None:
            return user_texts(db_path)
        ring = PostgresKeyRing.open_url(self.url, base64.b64decode(MASTER_KEY), "test")
        try:
            conn = PgConnection(psycopg.connect(self.url, autocommit=True), Sealer(ring))
            try:
                rows = conn.execute(
                    "SELECT picobot_open(content) AS content FROM messages"
                    " WHERE role = 'user' ORDER BY id"
                ).fetchall()
            finally:
                conn.close()
        finally:
            ring.close()
        return [str(r[0]) for r in rows]

    def integrity(self, db_path: Path) -> list[str]:
        """SQLite's integrity check; PostgreSQL keeps its own (nothing to check here)."""
        return integrity(db_path) if self.url is None else ["ok"]


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest) -> Store:
    """Each test runs on a shared SQLite file and on a shared PostgreSQL database."""
    if request.param == "sqlite":
        return Store(None)
    return Store(str(request.getfixturevalue("postgres_url")))


def instance(
    tmp_path: Path, callback_url: str, name: str, model: FakeLLMServer, store: Store
) -> Serve:
    """A serve instance on ``store`` whose model is ``model``."""
    serve = Serve(tmp_path, callback_url, name)
    serve.env.update(
        PICOBOT_LLM__PROVIDER="openai",
        PICOBOT_LLM__BASE_URL=model.base_url,
        PICOBOT_LLM__MODEL="stand-in",  # a named model: no /models request
        **store.env(tmp_path, name),
    )
    return serve


class Proxy:
    """A TCP relay: each connection to the next instance in turn, skipping refusals."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self._next = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in self.ports:
            port = self.ports[self._next % len(self.ports)]
            self._next += 1
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue
            await asyncio.gather(
                _pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True
            )
            return
        writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    finally:
        dst.close()


async def chat(url: str, i: int, turns: int, acked: list[str], tag: str) -> None:
    """``turns`` turns of client ``i`` through ``url``, reconnecting (through the proxy)
    when the instance it was on dies; a turn counts as acknowledged at its ``end``."""
    n = 0
    while n < turns:
        try:
            headers = {"Authorization": f"Bearer {ws_key(i)}"}
            async with connect(url, additional_headers=headers, open_timeout=SAFETY) as ws:
                assert json.loads(await ws.recv())["type"] == "hello"
                while n < turns:
                    text = f"{tag} client {i} turn {n}"
                    await ws.send(json.dumps({"type": "chat", "text": text, "id": str(n)}))
                    while json.loads(await ws.recv())["type"] != "end":
                        pass
                    acked.append(text)
                    n += 1
        except (ConnectionClosed, InvalidHandshake, OSError):
            # Its instance died (or was dying as the proxy reached it): connect again.
            await asyncio.sleep(0.1)


async def say(url: str, i: int, text: str) -> None:
    """One message of client ``i`` on its own connection to ``url``, until its ``end``."""
    headers = {"Authorization": f"Bearer {ws_key(i)}"}
    async with connect(url, additional_headers=headers, open_timeout=SAFETY) as ws:
        assert json.loads(await ws.recv())["type"] == "hello"
        await ws.send(json.dumps({"type": "chat", "text": text, "id": "1"}))
        while json.loads(await ws.recv())["type"] != "end":
            pass


async def post(
    http: aiohttp.ClientSession,
    url: str,
    n: int,
    tag: str,
    user: str | None = None,
    text: str | None = None,
) -> str:
    mid = f"{tag}-{n}"
    who = user or f"user{n % 4}"
    payload = {"user": who, "chat": f"chat{n % 4}", "text": text or mid, "message_id": mid}
    body = json.dumps(payload).encode()
    async with http.post(url, data=body, headers=signed_headers(body, secret=SECRET)) as resp:
        assert resp.status == 200, await resp.text()
    return mid


async def test_two_instances_share_one_store_and_one_survives_the_other(
    tmp_path: Path, callback: tuple[Callback, str], model: FakeLLMServer, store: Store
) -> None:
    cb, callback_url = callback
    a, b = (instance(tmp_path, callback_url, name, model, store) for name in "ab")
    proxy = Proxy([a.ws_port, b.ws_port])
    async with aiohttp.ClientSession() as http:
        try:
            await a.start(http)
            await b.start(http)
            url = f"ws://127.0.0.1:{await proxy.start()}/ws"

            # Both up: webhooks posted to either instance are each answered once.
            hooks = [await post(http, (a, b)[n % 2].hook_url, n, "both") for n in range(HOOKS)]
            async with asyncio.timeout(SAFETY):
                await cb.wait_for(set(hooks))
            acked: list[str] = []
            async with asyncio.timeout(SAFETY):
                await asyncio.gather(*(chat(url, i, 5, acked, "before") for i in range(CLIENTS)))
            await asyncio.sleep(1.0)  # a late second answer would have come by now
            assert all(cb.delivered[m] == 1 for m in hooks), cb.delivered

            # One user on A, then B, then A, then B again: each prompt holds what came before
            # on the other instance, the note saved on A too.
            async with asyncio.timeout(SAFETY):
                await say(b.ws_url, HISTORY_CLIENT, "first words on b")
                await say(a.ws_url, HISTORY_CLIENT, "/remember bike: my bike is teal")
                await say(a.ws_url, HISTORY_CLIENT, "then on a")
                await say(b.ws_url, HISTORY_CLIENT, "back on b")
            assert "first words on b" in prompt_of(model, "then on a")
            back = prompt_of(model, "back on b")
            assert "then on a" in back and "my bike is teal" in back
            # The generic webhook's "client4" is generic:client4, not ws:client4.
            other = await post(http, b.hook_url, 0, "separate", user=f"client{HISTORY_CLIENT}")
            async with asyncio.timeout(SAFETY):
                await cb.wait_for({other})
            assert "then on a" not in prompt_of(model, other)

            # Confirmations are in the store: a purge asked on one instance is answered
            # on the other, in a webhook chat and through the admin API alike.
            said = await post(http, a.hook_url, 0, "leaver-says", user="leaver")
            asked = await post(http, a.hook_url, 0, "leaver-asks", "leaver", "/purge user")
            async with asyncio.timeout(SAFETY):
                await cb.wait_for({said, asked})
            assert "Answer y or n" in cb.texts[asked][-1]
            yes = await post(http, b.hook_url, 0, "leaver-yes", "leaver", "y")
            async with asyncio.timeout(SAFETY):
                await cb.wait_for({yes})
            assert cb.texts[yes][-1].startswith("Deleted all data of user generic:leaver")
            admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
            plan = {"scope": "user", "user_id": f"generic:user{HOOKS % 4}"}
            async with http.post(f"{a.http_url}/api/v1/purge", json=plan, headers=admin) as r:
                token = (await r.json())["confirm_token"]
            confirm = f"/api/v1/purge/{token}/confirm"
            async with http.post(b.http_url + confirm, json={"answer": "y"}, headers=admin) as r:
                assert r.status == 200 and (await r.json())["deleted"]["messages"] > 0
            async with http.post(a.http_url + confirm, json={"answer": "y"}, headers=admin) as r:
                assert r.status == 404  # taken once, whichever instance asks

            # Under load, instance a dies.
            after: list[str] = []
            load = [asyncio.create_task(chat(url, i, 40, after, "during")) for i in range(CLIENTS)]
            late = [await post(http, a.hook_url, n, "late") for n in range(8)]
            async with asyncio.timeout(SAFETY):
                while len(after) < 10:  # noqa: ASYNC110 - a count, not an event, to wait for
                    await asyncio.sleep(0.01)
            os.kill(a.proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
            await a.wait()
            stored_at_kill = set(store.user_texts(a.db_path))
            acked_at_kill = set(after)
            assert acked_at_kill <= stored_at_kill
            async with asyncio.timeout(SAFETY):
                await asyncio.gather(*load)  # the clients go on through the proxy on b
            assert len(after) == 40 * CLIENTS
            # What a had taken but not answered, b answers once a's claims expire.
            started = time.monotonic()
            async with asyncio.timeout(CLAIM_SECS + SAFETY):
                await cb.wait_for(set(late))
            assert time.monotonic() - started < CLAIM_SECS + 15
        finally:
            await proxy.close()
            for serve in (a, b):
                if serve.proc is not None and serve.proc.returncode is None:
                    serve.proc.send_signal(signal.SIGTERM)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(serve.proc.wait(), 20)
                await serve.kill()
    texts = store.user_texts(a.db_path)
    assert store.integrity(a.db_path) == ["ok"]
    assert set(acked) | set(after) <= set(texts)
    # A message is stored twice only when its client sent it again: the instance died
    # after storing it and before the answer's end, so it was not acknowledged.
    twice = {t for t in texts if texts.count(t) > 1}
    assert not twice & acked_at_kill and len(twice) <= CLIENTS, twice
