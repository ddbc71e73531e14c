"""A flood of logins with one valid admin key logs out nobody else: over real HTTP,
1,000 logins with one key end only that key's oldest logins; another operator who
logged in before stays logged in, and the flooding key's latest logins work."""

from __future__ import annotations

import aiohttp

from picobot.dashboard.session import COOKIE, MAX_LOGINS_PER_KEY
from tests.dashboard.conftest import ADMIN_KEY, OTHER_KEY, Local, http_session, log_in

FLOOD = 1000


async def _login(http: aiohttp.ClientSession, base: str) -> str:
    async with http.post(
        f"{base}/admin/login", data={"key": ADMIN_KEY}, allow_redirects=False
    ) as r:
        assert r.status == 303
        return r.cookies[COOKIE].value


async def _live(base: str, token: str) -> bool:
    async with (
        aiohttp.ClientSession(cookies={COOKIE: token}) as http,
        http.get(f"{base}/admin/", allow_redirects=False) as resp,
    ):
        return resp.status == 200


async def test_a_thousand_logins_with_one_key_log_out_no_other_operator(local: Local) -> None:
    async with http_session() as other:
        await log_in(other, local.base, OTHER_KEY)
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as flood:
            tokens = [await _login(flood, local.base) for _ in range(FLOOD)]
        # The other operator is still logged in and can still act.
        async with other.get(f"{local.base}/admin/facts", allow_redirects=False) as resp:
            assert resp.status == 200
    assert all([await _live(local.base, t) for t in tokens[-MAX_LOGINS_PER_KEY:]])
    assert not any([await _live(local.base, t) for t in tokens[:5]])
    assert len(local.dashboard.logins) == MAX_LOGINS_PER_KEY + 1
