"""MCP over streamable HTTP on ``picobot serve``: the SDK's client against a real listener."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from picobot.cli.serve import ServeInfo, serve
from picobot.config.channels import ChannelsSettings, McpSettings
from picobot.config.settings import DataSettings, Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.store.conversation.events import EventFilter, list_events
from picobot.store.db import Database
from tests.mcp_server.conftest import ALICE_WORD, BOB_WORD, seed
from tests.mcp_server.helpers import TOOLS, call, refused, remember_list_forget, token_in

ALICE_KEY = "alice-key-0123456789abcdef"
BOB_KEY = "bobkey-0123456789abcdef"


def mcp_settings(data_dir: Path, **mcp: object) -> Settings:
    return Settings(
        data=DataSettings(dir=str(data_dir)),
        channels=ChannelsSettings(mcp=McpSettings(enabled=True, port=0, **mcp)),  # type: ignore[arg-type]
    )


async def serving(settings: Settings) -> AsyncIterator[str]:
    """``picobot serve`` in this process; the MCP URL while it runs."""
    stop = asyncio.Event()
    ready: asyncio.Future[ServeInfo] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve(settings, provider=ScriptedProvider(), stop=stop, ready=ready.set_result)
    )
    done, _ = await asyncio.wait([task, ready], return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # it failed to start: say why
    info = ready.result()
    assert info.mcp_url is not None
    try:
        yield info.mcp_url
    finally:
        stop.set()
        assert await task == 0


@pytest.fixture
async def url(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.setenv("PICOBOT_WS_API_KEYS", f"{ALICE_KEY}:alice,{BOB_KEY}:bob")
    await seed(data_dir, "ws:alice", "ws:bob")
    async for found in serving(mcp_settings(data_dir)):
        yield found


@contextlib.asynccontextmanager
async def client(url: str, key: str, header: str = "Authorization") -> AsyncIterator[Client]:
    """The SDK's client, presenting ``key`` the way MCP clients are configured to."""
    value = f"Bearer {key}" if header == "Authorization" else key
    async with (
        httpx2.AsyncClient(headers={header: value}) as http,
        Client(streamable_http_client(url, http_client=http)) as connected,
    ):
        yield connected


async def test_a_key_reaches_its_own_users_memory(url: str, data_dir: Path) -> None:
    async with client(url, ALICE_KEY) as alice:
        assert {t.name for t in (await alice.list_tools()).tools} == TOOLS
        assert ALICE_WORD in await call(alice, "search_memory", query=ALICE_WORD)
        assert await call(alice, "search_memory", query=BOB_WORD) == "no matches"
        await remember_list_forget(alice, "sencha")
    # X-API-Key works too, and names bob: alice's word is not his to find.
    async with client(url, BOB_KEY, header="X-API-Key") as bob:
        assert BOB_WORD in await call(bob, "search_memory", query=BOB_WORD)
        assert await call(bob, "search_memory", query=ALICE_WORD) == "no matches"
    # Each call is evented as the chat's tool calls are: content-free, under its user.
    db = await Database.open(data_dir / "conversations.db", migrate=False)
    try:
        events = await db.read(
            lambda c: list_events(c, EventFilter(user_id="ws:alice", types=("tool.completed",)), 50)
        )
    finally:
        await db.close()
    names = [e.payload["name"] for e in events]
    assert names.count("forget") == 3 and "search_memory" in names
    assert all(e.payload["via"] == "mcp" for e in events)
    assert not any(ALICE_WORD in str(e.payload) for e in events)


async def test_another_users_confirmation_deletes_nothing(url: str) -> None:
    async with client(url, ALICE_KEY) as alice, client(url, BOB_KEY) as bob:
        await call(alice, "remember", key="secret", content="alice only")
        token = token_in(await call(alice, "forget", note="secret"))
        # Bob holds alice's token: answered as unknown, and hers stays usable.
        assert "no pending forget" in await refused(bob, "forget", confirmation=token)
        assert "No memories" in await call(bob, "list_notes")
        # Bob cannot even plan a forget of her note: it is not his.
        assert "no note 'secret'" in await refused(bob, "forget", note="secret")
        assert "Forgot note" in await call(alice, "forget", confirmation=token)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-key-0123456789abcdef"},
        {"X-API-Key": "short"},
        # A valid key under another scheme is not presented.
        {"Authorization": f"Basic {ALICE_KEY}"},
    ],
)
async def test_a_missing_or_wrong_key_is_refused(url: str, headers: dict[str, str]) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    sent = [*headers.items(), ("Accept", "application/json, text/event-stream")]
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers=sent) as resp:
        assert resp.status == 401
        assert resp.headers["WWW-Authenticate"] == 'Bearer realm="picobot"'
        assert "invalid API key" in await resp.text()


async def test_the_sdk_client_with_a_wrong_key_gets_nothing(url: str) -> None:
    with pytest.raises(ExceptionGroup) as raised:
        async with client(url, "wrong-key-0123456789abcdef") as wrong:
            await wrong.list_tools()
    assert "Missing or invalid API key" in repr(raised.value)


async def test_calls_over_the_rate_are_refused(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PICOBOT_WS_API_KEYS", f"{ALICE_KEY}:alice")
    async for url in serving(mcp_settings(data_dir, rate_limit_per_minute=1)):
        async with client(url, ALICE_KEY) as alice:
            answers = [await alice.call_tool("list_notes", {}) for _ in range(25)]
    refusals = [a for a in answers if a.is_error]
    # The burst (20) passes; the rest wait for the per-minute rate.
    assert len(answers) - len(refusals) == 20
    assert all("Too many calls" in str(a.content) for a in refusals)


async def test_a_session_opened_with_one_key_is_not_anothers(url: str) -> None:
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    async with aiohttp.ClientSession(headers=accept) as http:
        mine = {"Authorization": f"Bearer {ALICE_KEY}"}
        async with http.post(url, json=hello, headers=mine) as resp:
            assert resp.status == 200, await resp.text()
            session = resp.headers["Mcp-Session-Id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        theirs = {
            "Authorization": f"Bearer {BOB_KEY}",
            "Mcp-Session-Id": session,
            "Mcp-Protocol-Version": "2025-06-18",
        }
        async with http.post(url, json=listing, headers=theirs) as resp:
            # Answered as if the session did not exist.
            assert resp.status == 404
        async with http.post(
            url, json=listing, headers={**theirs, "Authorization": f"Bearer {ALICE_KEY}"}
        ) as resp:
            assert resp.status == 200
