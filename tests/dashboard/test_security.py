"""The dashboard's door over real HTTP against ``picobot serve``: no data without a
login, the cookie's attributes, CSRF and origin checks, logout ending the login on the
server, the key never in a URL, and failed logins limited with the admin API's budget."""

from __future__ import annotations

import re
from http.cookies import SimpleCookie

from tests.dashboard.conftest import ADMIN_KEY, CSRF, Served, http_session, log_in

SECRET_TEXT = "secret-fact-text-7731"
TOKEN = re.compile(r'name="token" value="([^"]+)"')
PAGES = [
    "/admin/",
    "/admin/facts",
    "/admin/facts/rows",
    "/admin/memories/rows",
    "/admin/sessions",
    "/admin/search?user=ws:alice&q=hello",
    "/admin/purge",
    "/admin/export?user=ws:alice",
]


async def test_without_a_login_every_page_is_the_login_and_never_data(served: Served) -> None:
    fact = await served.add_fact("ws:alice", "knowledge", SECRET_TEXT, 0.9)
    async with http_session() as http:
        for path in [*PAGES, f"/admin/facts/{fact.id}/edit", f"/admin/facts/{fact.id}/delete"]:
            async with http.get(served.base + path, allow_redirects=False) as resp:
                body = await resp.text()
                assert resp.status == 303, path
                assert resp.headers["Location"] == "/admin/login"
                assert SECRET_TEXT not in body
            # An htmx partial gets 401 and where to log in, not a page to swap in.
            headers = {"HX-Request": "true"}
            async with http.get(served.base + path, headers=headers, allow_redirects=False) as r:
                assert r.status == 401, path
                assert r.headers["HX-Redirect"] == "/admin/login"
                assert SECRET_TEXT not in await r.text()
        # Writes without a login change nothing.
        async with http.post(
            f"{served.base}/admin/facts/delete",
            data={"ids": str(fact.id), "confirm": "yes"},
            allow_redirects=False,
        ) as resp:
            assert resp.status == 303
        async with http.get(f"{served.base}/admin/login") as resp:
            page = await resp.text()
            assert resp.status == 200
            assert 'method="post" action="/admin/login"' in page
            assert resp.headers["X-Frame-Options"] == "DENY"
            assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]
    listed = await _facts_text(served)
    assert SECRET_TEXT in listed


async def _facts_text(served: Served) -> str:
    async with http_session() as http:
        await log_in(http, served.base)
        async with http.get(f"{served.base}/admin/facts") as resp:
            return await resp.text()


async def test_the_cookie_is_an_opaque_httponly_strict_token(served: Served) -> None:
    async with (
        http_session() as http,
        http.post(
            f"{served.base}/admin/login", data={"key": ADMIN_KEY}, allow_redirects=False
        ) as resp,
    ):
        assert resp.status == 303
        raw = resp.headers.getall("Set-Cookie")
    assert len(raw) == 1
    cookie = SimpleCookie(raw[0])["picobot_dashboard"]
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Strict"
    assert cookie["path"] == "/admin/"
    assert int(cookie["max-age"]) == 8 * 3600
    assert not cookie["secure"]  # plain HTTP on loopback; over TLS it is Secure
    assert ADMIN_KEY not in raw[0] and ADMIN_KEY[:8] not in cookie.value
    assert len(cookie.value) >= 40


async def test_a_key_in_the_url_logs_nobody_in(served: Served) -> None:
    async with http_session() as http:
        async with http.get(f"{served.base}/admin/login?key={ADMIN_KEY}") as resp:
            assert "Set-Cookie" not in resp.headers
        async with http.get(f"{served.base}/admin/", allow_redirects=False) as resp:
            assert resp.status == 303


async def test_a_wrong_key_is_refused_with_the_form(served: Served) -> None:
    async with (
        http_session() as http,
        http.post(f"{served.base}/admin/login", data={"key": "not-the-key-0123456789"}) as resp,
    ):
        assert resp.status == 401
        assert "That is not an admin key." in await resp.text()
        assert "Set-Cookie" not in resp.headers


async def test_state_changes_need_the_logins_csrf_token_and_origin(served: Served) -> None:
    doomed = await served.add_fact("ws:alice", "knowledge", "the csrf target", 0.9)
    async with http_session() as http:
        csrf = await log_in(http, served.base)
        asked = {"csrf_token": csrf}
        async with http.post(f"{served.base}/admin/facts/{doomed.id}/delete", data=asked) as r:
            token = TOKEN.search(await r.text())
        assert token is not None
        url = f"{served.base}/admin/facts/delete"
        form = {"token": token.group(1), "confirm": "yes"}
        for sent, headers in [
            (form, {}),  # no token
            ({**form, "csrf_token": "x" * 43}, {}),  # a wrong one
            ({**form, "csrf_token": csrf}, {"Origin": "http://evil.example"}),
            (form, {"X-CSRF-Token": csrf + "x"}),
        ]:
            async with http.post(url, data=sent, headers=headers, allow_redirects=False) as r:
                assert r.status == 403
                assert "Nothing was changed." in await r.text()
        async with http.get(f"{served.base}/admin/facts") as resp:
            assert "the csrf target" in await resp.text()
        # Another login's token is no good either: tokens belong to their login.
        async with http_session() as other:
            other_csrf = await log_in(other, served.base)
        assert other_csrf != csrf
        async with http.post(url, data={**form, "csrf_token": other_csrf}) as r:
            assert r.status == 403
        # The header (how htmx sends it) and the form field both work.
        async with http.post(url, data=form, headers={"X-CSRF-Token": csrf}) as r:
            assert r.status == 200
        async with http.get(f"{served.base}/admin/facts") as resp:
            assert "the csrf target" not in await resp.text()


async def test_a_cookie_kept_after_logout_opens_nothing(served: Served) -> None:
    await served.add_fact("ws:alice", "knowledge", SECRET_TEXT, 0.9)
    async with http_session() as http:
        csrf = await log_in(http, served.base)
        stolen = {c.key: c.value for c in http.cookie_jar}
        async with http.post(f"{served.base}/admin/logout", data={"csrf_token": csrf}) as r:
            assert r.status == 200 and str(r.url).endswith("/admin/login")
    async with http_session() as thief:
        thief.cookie_jar.update_cookies(stolen, response_url=_url(served))
        async with thief.get(f"{served.base}/admin/facts", allow_redirects=False) as resp:
            assert resp.status == 303
            assert SECRET_TEXT not in await resp.text()
        async with thief.post(
            f"{served.base}/admin/purge",
            data={"csrf_token": csrf, "scope": "user", "target": "ws:alice"},
            allow_redirects=False,
        ) as resp:
            assert resp.status == 303
            assert resp.headers["Location"] == "/admin/login"


def _url(served: Served) -> object:
    from yarl import URL

    return URL(served.base + "/admin/")


async def test_failed_logins_and_api_failures_share_one_limit(served: Served) -> None:
    """50 failures (the budget the fixture sets), half through the API, half through the
    form: then even the right key is refused, before it is checked."""
    async with http_session() as http:
        for _ in range(25):
            async with http.get(
                f"{served.base}/api/v1/sessions", headers={"X-API-Key": "wrong-key-0123456789"}
            ) as r:
                assert r.status == 401
        for _ in range(25):
            async with http.post(
                f"{served.base}/admin/login", data={"key": "wrong-key-0123456789"}
            ) as r:
                assert r.status == 401
        async with http.post(f"{served.base}/admin/login", data={"key": ADMIN_KEY}) as r:
            assert r.status == 429
            assert int(r.headers["Retry-After"]) > 0
            assert "Too many failed attempts" in await r.text()
            assert CSRF.search(await r.text()) is None
