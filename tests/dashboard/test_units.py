"""The dashboard's pieces on their own: logins and their expiry (polls do not keep one
alive), CSRF comparison, highlighting that never lets markup through, the facts page's
filters and its polls' reads, and when the browser tests skip."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from picobot.admin.auth_limit import FailedAuthLimit
from picobot.config.settings import Settings
from picobot.dashboard.context import Context
from picobot.dashboard.guard import POLL_HEADER, Guard
from picobot.dashboard.render import Renderer, highlight
from picobot.dashboard.session import COOKIE, MAX_LOGINS_PER_KEY, Login, LoginStore
from picobot.dashboard.views_facts import FactViews, read_filters
from picobot.privacy.scopes import Actor
from picobot.runtime import build_services
from picobot.store.db import Database
from picobot.tasks.supervisor import TaskSupervisor
from tests.dashboard.conftest import chromium_missing

OPERATOR = Actor("api:dash-adm", operator=True)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_login_ends_when_idle_too_long() -> None:
    clock = Clock()
    logins = LoginStore(idle_secs=60, max_secs=3600, clock=clock)
    token, login = logins.create(OPERATOR)
    clock.now += 59
    assert logins.get(token) is login  # and the use refreshes its idle time
    clock.now += 59
    assert logins.get(token) is login
    clock.now += 61
    assert logins.get(token) is None
    assert login.ended
    assert len(logins) == 0


def test_a_login_ends_at_its_maximum_age_however_active() -> None:
    clock = Clock()
    logins = LoginStore(idle_secs=60, max_secs=150, clock=clock)
    token, _ = logins.create(OPERATOR)
    for _ in range(3):
        clock.now += 50
        assert logins.get(token) is not None
    clock.now += 1
    assert logins.get(token) is None


def test_logout_forgets_the_login_and_tokens_are_not_the_keys_of_the_store() -> None:
    logins = LoginStore(idle_secs=60, max_secs=3600, clock=Clock())
    token, login = logins.create(OPERATOR)
    other, _ = logins.create(OPERATOR)
    assert token != other and login.csrf != token
    assert token not in vars(logins)["_logins"]  # kept by digest only
    assert logins.end(token)
    assert logins.get(token) is None
    assert not logins.end(token)
    assert logins.get(other) is not None
    assert logins.get(None) is None and logins.get("") is None


def test_a_login_flood_ends_only_the_flooding_keys_oldest_logins() -> None:
    logins = LoginStore(idle_secs=60, max_secs=3600, clock=Clock())
    other = Actor("api:other-op", operator=True)
    theirs = [logins.create(other)[0] for _ in range(3)]
    first, first_login = logins.create(OPERATOR)
    made = [logins.create(OPERATOR)[0] for _ in range(1000)]
    assert len(logins) == MAX_LOGINS_PER_KEY + 3
    assert logins.get(first) is None and first_login.ended
    assert all(logins.get(token) is not None for token in made[-MAX_LOGINS_PER_KEY:])
    assert all(logins.get(token) is None for token in made[:-MAX_LOGINS_PER_KEY])
    assert all(logins.get(token) is not None for token in theirs)
    small = LoginStore(idle_secs=60, max_secs=3600, clock=Clock(), per_operator=1)
    one, _ = small.create(OPERATOR)
    two, _ = small.create(OPERATOR)
    assert small.get(one) is None and small.get(two) is not None


def test_csrf_tokens_compare_exactly() -> None:
    _, login = LoginStore(idle_secs=60, max_secs=60, clock=Clock()).create(OPERATOR)
    assert login.csrf_ok(login.csrf)
    assert not login.csrf_ok(login.csrf + "x")
    assert not login.csrf_ok(login.csrf[:-1])
    assert not login.csrf_ok("")
    assert not login.csrf_ok(None)
    assert not login.csrf_ok("\udcff")


def test_highlight_marks_terms_and_escapes_everything_else() -> None:
    text = "<script>alert(1)</script> Tea & TEA time"
    out = str(highlight(text, ["tea"]))
    assert "<script>" not in out
    assert "&lt;script&gt;" in out
    assert out.count("<mark>") == 2
    assert "<mark>Tea</mark> &amp; <mark>TEA</mark>" in out
    assert str(highlight("<b>", [])) == "&lt;b&gt;"
    # A term that is markup itself is matched as text and escaped inside the mark.
    assert str(highlight("a <b> c", ["<b>"])) == "a <mark>&lt;b&gt;</mark> c"


def test_filters_read_what_the_operator_typed_and_report_bad_bounds() -> None:
    found = read_filters(
        {"user": " ws:alice ", "active": "no", "min": "0.2", "max": "2", "text": "tea"}
    )
    assert found.where.user_id == "ws:alice"
    assert found.where.active is False
    assert found.where.min_confidence == 0.2
    assert found.where.max_confidence is None
    assert found.error == "Maximum confidence must be between 0 and 1, not '2'."
    assert "user=ws%3Aalice" in found.query and "max=2" in found.query
    nothing = read_filters({})
    assert nothing.where.names_nothing and nothing.error is None
    assert read_filters({"min": "abc"}).error is not None


def test_a_chromium_that_does_not_run_skips_the_browser_tests_with_the_reason(
    tmp_path: Path,
) -> None:
    assert chromium_missing(tmp_path / "nothing") is not None
    assert "no Chromium at" in str(chromium_missing(tmp_path / "nothing"))
    # What Ubuntu's transitional package installs without snapd: a wrapper that fails.
    wrapper = tmp_path / "chromium"
    wrapper.write_text(
        "#!/bin/sh\necho 'Command requires the chromium snap to be installed.' >&2\nexit 1\n"
    )
    wrapper.chmod(0o755)
    reason = chromium_missing(wrapper)
    assert reason is not None
    assert "exit 1" in reason and "requires the chromium snap" in reason
    assert "apt-get install chromium" in reason


def test_a_poll_finds_the_login_without_keeping_it_alive() -> None:
    clock = Clock()
    logins = LoginStore(idle_secs=60, max_secs=3600, clock=clock)
    token, login = logins.create(OPERATOR)
    for _ in range(3):
        clock.now += 20
        assert logins.get(token, touch=False) is login
    clock.now += 1  # 61 s since the operator's last own request
    assert logins.get(token, touch=False) is None
    assert login.ended


async def _serve_guarded(logins: LoginStore) -> tuple[web.AppRunner, str]:
    async def listing(request: web.Request, login: Login) -> web.StreamResponse:
        return web.Response(text=f"rows for {login.actor.id}")

    guard = Guard(
        logins,
        Renderer(),
        lambda key: None,
        FailedAuthLimit(5, 60),
        always_secure=False,
    )
    app = web.Application()
    app.router.add_get("/admin/facts/rows", guard.page(listing))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/admin/facts/rows"


async def test_an_unattended_tab_polling_every_3_s_reaches_the_idle_limit() -> None:
    """Over real HTTP, with a fake clock: the page's polls (the header htmx adds) do not
    refresh the login; a request of the operator's does."""
    clock = Clock()
    logins = LoginStore(idle_secs=60, max_secs=3600, clock=clock)
    token, _ = logins.create(OPERATOR)
    runner, url = await _serve_guarded(logins)
    cookies = {COOKIE: token}
    poll = {"HX-Request": "true", POLL_HEADER: "1"}
    try:
        async with aiohttp.ClientSession(cookies=cookies) as http:
            for _ in range(20):  # 60 s of polling
                clock.now += 3
                async with http.get(url, headers=poll, allow_redirects=False) as resp:
                    assert resp.status == 200
            async with http.get(url, allow_redirects=False) as resp:  # the operator clicks
                assert resp.status == 200
            for _ in range(20):
                clock.now += 3
                async with http.get(url, headers=poll, allow_redirects=False) as resp:
                    assert resp.status == 200
            clock.now += 3  # 63 s after the operator's click, polled all along
            async with http.get(url, headers=poll, allow_redirects=False) as resp:
                assert resp.status == 401
                assert resp.headers["HX-Redirect"] == "/admin/login"
    finally:
        await runner.cleanup()


async def test_each_poll_reads_only_its_own_listing(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    renderer = Renderer()
    ctx = Context(
        db=db,
        settings=Settings(),
        tasks=TaskSupervisor(),
        renderer=renderer,
        services=build_services(Settings(), db),
        clock=time.time,
    )
    views = FactViews(ctx)
    _, login = LoginStore(idle_secs=60, max_secs=60, clock=Clock()).create(OPERATOR)
    reads: list[object] = []
    real_read = db.read

    async def counted(fn: Any) -> Any:
        reads.append(fn)
        return await real_read(fn)

    monkeypatch.setattr(db, "read", counted)
    for handler, path in (
        (views.rows, "/admin/facts/rows"),
        (views.memory_rows, "/admin/memories/rows"),
    ):
        reads.clear()
        response = await handler(make_mocked_request("GET", path), login)
        assert response.status == 200
        assert len(reads) == 1, path
