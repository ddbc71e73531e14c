"""Failed admin authentications: limited per peer (429 + Retry-After) and logged once."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from picobot.config.channels import ServerSettings
from picobot.config.settings import DataSettings, Settings
from tests.admin.helpers import KEY_A, Api, FakeClock, start

WRONG = {"Authorization": "Bearer wrong-key-0123456789"}
RIGHT = {"Authorization": f"Bearer {KEY_A}"}


async def limited(stack: AsyncExitStack, tmp_path: Path, max_failures: int) -> Api:
    server = ServerSettings(admin_auth_max_failures=max_failures, admin_auth_window_secs=60)
    settings = Settings(data=DataSettings(dir=str(tmp_path)), server=server)
    return await start(stack, tmp_path, FakeClock(), settings=settings)


async def test_a_peer_out_of_failures_gets_429_before_its_key_is_checked(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        api = await limited(stack, tmp_path, 5)
        for _ in range(5):
            await api.call("GET", "/api/v1/sessions", key="wrong-key-0123456789", expect=401)
        async with api.client.get("/api/v1/sessions", headers=WRONG) as r:
            assert r.status == 429
            assert r.headers["Retry-After"] == "12"  # one try regained per 60 s / 5
            body = await r.json()
        assert body["error"]["code"] == "too_many_failures"
        api.contract.check("GET", "/api/v1/sessions", 429, r.content_type, body)
        # The right key in the middle of a guessing run is not even looked at...
        await api.call("GET", "/api/v1/sessions", expect=429)
        # ...while the public probes stay open to the orchestrator at that address.
        await api.call("GET", "/healthz", key=None)
        await api.call("GET", "/readyz", key=None)
        api.clock.now += 12
        await api.call("GET", "/api/v1/sessions")


async def test_a_thousand_wrong_keys_leave_two_log_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    statuses: dict[int, int] = {}
    with caplog.at_level(logging.INFO, logger="picobot.admin"):
        async with AsyncExitStack() as stack:
            api = await limited(stack, tmp_path, 10)
            for _ in range(1000):
                async with api.client.get("/api/v1/sessions", headers=WRONG) as r:
                    statuses[r.status] = statuses.get(r.status, 0) + 1
    assert statuses == {401: 10, 429: 990}
    lines = [r.getMessage() for r in caplog.records if r.name == "picobot.admin.auth_limit"]
    # The first, then the count when the interval closes (here: at shutdown).
    assert len(lines) == 2, lines
    assert lines[0] == (
        "admin API refused GET /api/v1/sessions from 127.0.0.1: missing or invalid key"
    )
    assert lines[1] == (
        "admin API: failed or refused authentications: 999 more from 127.0.0.1 in the last 60s"
    )


async def test_a_forged_log_line_in_the_path_stays_on_its_own_line(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    """``%0a`` in the path of an unauthenticated request wrote a second, forged line."""
    line = "2026-01-01 00:00:00,000 INFO picobot.admin: purge executed: FORGED"
    with caplog.at_level(logging.INFO, logger="picobot.admin"):
        async with api.client.get(f"/api/v1/users/x%0a{line}/memories") as r:
            assert r.status == 401
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("picobot.admin")]
    refused = [m for m in messages if "FORGED" in m]
    assert len(refused) == 1
    assert refused[0].splitlines() == [refused[0]]
    assert f"/api/v1/users/x\\x0a{line}/memories" in refused[0]
