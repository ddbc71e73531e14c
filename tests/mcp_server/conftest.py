"""The MCP server's fixtures: a data directory with two users' messages, and clients."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from picobot.config.settings import DataSettings, Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound
from picobot.runtime import open_runtime

ALICE_WORD = "Zorblax"
"""Only in alice's history."""
BOB_WORD = "Quaxling"
"""Only in bob's history."""


@dataclass(frozen=True)
class Users:
    """The two users the data directory holds, by user id."""

    alice: str
    bob: str


async def say(settings: Settings, user_id: str, text: str) -> None:
    """One chat turn of ``user_id`` (the message is stored as any channel stores it)."""
    channel = user_id.partition(":")[0]
    async with open_runtime(settings, provider=ScriptedProvider()) as rt:
        async for _ in rt.kernel.handle(Inbound(Identity(channel, user_id, user_id), text)):
            pass


async def seed(data_dir: Path, alice: str, bob: str) -> Users:
    """Give alice and bob one message each, with a word nobody else said."""
    settings = Settings(data=DataSettings(dir=str(data_dir)))
    await say(settings, alice, f"my cat is called {ALICE_WORD}")
    await say(settings, bob, f"my dog is called {BOB_WORD}")
    return Users(alice, bob)


@pytest.fixture
async def data_dir(tmp_path: Path) -> AsyncIterator[Path]:
    path = tmp_path / "data"
    path.mkdir()
    yield path
