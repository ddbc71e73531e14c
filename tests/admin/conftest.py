"""Fixtures of the admin API tests: a real runtime over a real SQLite file behind a
real aiohttp server on 127.0.0.1:0; only the model is scripted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from tests.admin.helpers import ALICE, BOB, KEY_A, KEY_B, WS_KEY, Api, FakeClock, start


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PICOBOT_ADMIN_API_KEYS", f"{KEY_A}, {KEY_B}")
    monkeypatch.setenv("PICOBOT_WS_API_KEYS", WS_KEY)
    # Tests here fail authentication many times from one address on purpose; the
    # per-address limit has tests of its own (test_auth_limit.py).
    monkeypatch.setenv("PICOBOT_SERVER__ADMIN_AUTH_MAX_FAILURES", "1000")


@pytest.fixture
async def api(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Api]:
    async with AsyncExitStack() as stack:
        yield await start(stack, tmp_path, clock)


@pytest.fixture
async def chatted(api: Api) -> Api:
    """Alice: two sessions and a memory; Bob: one session."""
    await api.chat(ALICE, "I love pineapple pizza")
    await api.chat(ALICE, "/remember food: pineapple pizza")
    await api.chat(ALICE, "/new")
    await api.chat(ALICE, "tell me about volcanoes")
    await api.chat(BOB, "pineapple belongs nowhere")
    return api
