"""Admin API memories: create, update, delete, the chat's rules, bodies and limits."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from picobot.config.settings import DataSettings, MemorySettings, SessionSettings, Settings
from picobot.store.conversation.memories import MemoryRepo
from tests.admin.helpers import (
    ALICE,
    BOB,
    KEY_A,
    Api,
    FakeClock,
    start,
    users,
)

# --- memories ------------------------------------------------------------------------------


async def test_memory_create_update_delete(chatted: Api) -> None:
    path = users(BOB) + "/memories"
    assert (await chatted.call("GET", path))["memories"] == []
    created = await chatted.call(
        "POST", path, body={"key": "city", "content": " Lisbon "}, expect=201
    )
    assert created["key"] == "city" and created["content"] == "Lisbon"
    again = await chatted.call("POST", path, body={"key": "city", "content": "x"}, expect=409)
    assert again["error"]["code"] == "exists"
    updated = await chatted.call("PUT", path + "/city", body={"content": "Porto"})
    assert updated["content"] == "Porto"
    listing = await chatted.call("GET", path)
    assert [(m["key"], m["content"]) for m in listing["memories"]] == [("city", "Porto")]
    # The user sees what the operator wrote, through the chat command.
    events = await chatted.chat(BOB, "/memories")
    assert any("city: Porto" in e.text for e in events)
    await chatted.call("DELETE", path + "/city", expect=204)
    missing = await chatted.call("DELETE", path + "/city", expect=404)
    assert missing["error"]["code"] == "not_found"
    await chatted.call("PUT", path + "/city", body={"content": "x"}, expect=404)
    assert await MemoryRepo(chatted.runtime.db).get(BOB, "city") is None


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"key": "Bad Key", "content": "x"}, "invalid"),
        ({"key": "system_prompt", "content": "x"}, "invalid"),
        ({"key": "k" * 65, "content": "x"}, "invalid"),
        ({"key": "ok", "content": "   "}, "invalid"),
        ({"key": "ok", "content": "x" * 2001}, "invalid"),
        ({"key": "ok"}, "missing_field"),
        ({"key": "ok", "content": "x", "owner": "y"}, "unknown_field"),
        ({"key": 5, "content": "x"}, "invalid_field"),
        (["key", "content"], "invalid_body"),
    ],
)
async def test_memory_validation_matches_the_chat_rules(chatted: Api, body: Any, code: str) -> None:
    error = await chatted.call("POST", users(BOB) + "/memories", body=body, expect=400)
    assert error["error"]["code"] == code
    assert await MemoryRepo(chatted.runtime.db).count(BOB) == 0


async def test_malformed_and_oversized_bodies(chatted: Api) -> None:
    path = users(BOB) + "/memories"
    bad = await chatted.call("POST", path, raw=b'{"key": "a", ', expect=400)
    assert bad["error"]["code"] == "invalid_json"
    bad = await chatted.call("POST", path, raw=b"\xff\xfe", expect=400)
    assert bad["error"]["code"] == "invalid_json"
    # Nesting past Python's recursion limit is refused like any other malformed body.
    for deep in (b"[" * 50_000, b"[" * 30_000 + b"]" * 30_000, b'{"a":' * 12_000):
        bad = await chatted.call("POST", path, raw=deep, expect=400)
        assert bad["error"]["code"] == "invalid_json"
    big = json.dumps({"key": "a", "content": "x" * 70_000}).encode()
    error = await chatted.call("POST", path, raw=big, expect=413)
    assert error["error"]["code"] == "body_too_large"
    # The same limit holds without a Content-Length (a chunked upload).

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b" " * 8_000

    async with chatted.client.post(path, headers={"X-API-Key": KEY_A}, data=chunks()) as resp:
        assert resp.status == 413
    assert await MemoryRepo(chatted.runtime.db).count(BOB) == 0


async def test_memory_cap_and_redaction(tmp_path: Path, clock: FakeClock) -> None:
    settings = Settings(
        data=DataSettings(dir=str(tmp_path)),
        session=SessionSettings(memory=MemorySettings(max_user_memories=1)),
    )
    async with AsyncExitStack() as stack:
        api = await start(stack, tmp_path, clock, settings=settings)
        path = users(ALICE) + "/memories"
        secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2"
        saved = await api.call(
            "POST", path, body={"key": "token", "content": f"my key is {secret}"}, expect=201
        )
        assert secret not in saved["content"] and "[REDACTED:" in saved["content"]
        full = await api.call("POST", path, body={"key": "two", "content": "x"}, expect=409)
        assert full["error"]["code"] == "limit_reached"


async def test_memory_writes_refused_when_memories_are_off(
    tmp_path: Path, clock: FakeClock
) -> None:
    settings = Settings(
        data=DataSettings(dir=str(tmp_path)),
        session=SessionSettings(memory=MemorySettings(enable_user_memories=False)),
    )
    async with AsyncExitStack() as stack:
        api = await start(stack, tmp_path, clock, settings=settings)
        error = await api.call(
            "POST", users(ALICE) + "/memories", body={"key": "a", "content": "b"}, expect=409
        )
        assert error["error"]["code"] == "memories_disabled"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"key": "ok"}', "Missing field(s): content."),
        (b'{"key": "ok", "content": "x", "owner": "y", "as": 1}', "Unknown field(s): as, owner."),
        (b'{"key": 5, "content": "x"}', "Field 'key' must be a string."),
        (b'{"key": "ok", "content": "\\ud800"}', "Field 'content' is not valid Unicode."),
    ],
)
async def test_body_errors_name_the_field(chatted: Api, raw: bytes, message: str) -> None:
    error = await chatted.call("POST", users(BOB) + "/memories", raw=raw, expect=400)
    assert error["error"]["message"] == message
    assert await MemoryRepo(chatted.runtime.db).count(BOB) == 0
