"""Fixtures of the WebSocket channel tests: an exit stack, and the API keys in the env."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from tests.channels.websocket.test_server import ENV, KEY_A, KEY_B, KEY_C, Server, start


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


@pytest.fixture(autouse=True)
def api_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, f"{KEY_A}, {KEY_B}, {KEY_C}:carol")


@pytest.fixture
async def server(stack: AsyncExitStack, tmp_path: Path) -> Server:
    """A runtime and a started channel (frames up to 1024 bytes)."""
    return await start(stack, tmp_path, max_message_bytes=1024)
