"""No GET of the dashboard changes anything: every route of the route table is visited
with a login and every parameter a write would take, and afterwards no event was
recorded, no fact, memory or login changed, and the operator's pending purge is still
there to confirm. Every state-changing route is a POST that needs the login's CSRF token
(a POST without it is refused), and the list of them is checked against the route table,
so a new write route cannot skip the audit."""

from __future__ import annotations

import re
import time

from aiohttp import web

from picobot.messages import Identity, Inbound
from picobot.store.conversation.events import EventFilter, list_events
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.learned.fact_rules import observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.learned.facts import get_fact
from tests.dashboard.conftest import Local, http_session, log_in

ALICE = "telegram:42"
TOKEN = re.compile(r'name="token" value="([^"]+)"')
ACTIONS = {
    "/admin/logout",
    "/admin/purge",
    "/admin/purge/confirm",
    "/admin/facts/{id}",
    "/admin/facts/bulk",
    "/admin/facts/delete",
    "/admin/facts/{id}/delete",
    "/admin/memories/delete",
}
"""Every route that changes something (the login form aside: it needs no token)."""


def _routes(app: web.Application, method: str) -> set[str]:
    return {
        route.resource.canonical
        for route in app.router.routes()
        if route.method == method
        and route.resource is not None
        and route.resource.canonical.startswith("/admin")
        and not isinstance(route.resource, web.StaticResource)
    }


def test_every_write_route_of_the_dashboard_is_audited(local: Local) -> None:
    assert _routes(local.app, "POST") - {"/admin/login"} == ACTIONS


async def _event_count(local: Local) -> int:
    return len(await local.runtime.db.read(lambda c: list_events(c, EventFilter(), 100_000)))


async def test_no_get_changes_state_and_no_post_works_without_the_token(local: Local) -> None:
    db = local.runtime.db
    fact = await FactStore(db).create(
        ALICE,
        observation(None, "knowledge", "likes green tea"),
        confidence=0.9,
        actor="cli:test",
        now=time.time(),
    )
    await MemoryRepo(db).save(ALICE, "pet", "a cat named Tom", max_count=50, actor="cli:test")
    events = [
        e
        async for e in local.runtime.kernel.handle(
            Inbound(Identity("telegram", ALICE, ALICE), "hi")
        )
    ]
    session = next(e.session_id for e in events if e.session_id)
    async with http_session() as http:
        csrf = await log_in(http, local.base)
        planned = {"csrf_token": csrf, "scope": "user", "target": ALICE}
        async with http.post(f"{local.base}/admin/purge", data=planned) as resp:
            assert resp.status == 200
            token = TOKEN.search(await resp.text())
        assert token is not None
        form = {
            "csrf_token": csrf,
            "token": token.group(1),
            "answer": "yes",
            "confirm": "yes",
            "scope": "user",
            "target": ALICE,
            "ids": str(fact.id),
            "action": "delete",
            "text": "changed by a GET",
            "confidence": "0.1",
            "user": ALICE,
            "key": "pet",
            "back": "/admin/facts",
        }
        before = await _event_count(local)

        def url(path: str) -> str:
            named = session if path.startswith("/admin/sessions/") else str(fact.id)
            return local.base + path.replace("{id}", named)

        for path in sorted(_routes(local.app, "GET") | ACTIONS):
            async with http.get(url(path), params=form, allow_redirects=False) as resp:
                await resp.read()
                # A page (a form at most), a redirect to one, or 405: never a change.
                assert resp.status in (200, 303, 404, 405), (path, resp.status)
        no_token = {k: v for k, v in form.items() if k != "csrf_token"}
        for path in sorted(ACTIONS):
            async with http.post(url(path), data=no_token, allow_redirects=False) as resp:
                assert resp.status == 403, path
                assert "Nothing was changed." in await resp.text()
        assert await _event_count(local) == before
        stored = await db.read(lambda c: get_fact(c, fact.id))
        assert stored is not None and stored.text == "likes green tea" and stored.active
        assert await MemoryRepo(db).get(ALICE, "pet") is not None
        # The login lives, and the operator's plan is still pending (a cancel finds it).
        cancel = {"csrf_token": csrf, "token": token.group(1), "answer": "no"}
        async with http.post(f"{local.base}/admin/purge/confirm", data=cancel) as resp:
            assert resp.status == 200, await resp.text()
            assert "Nothing was deleted." in await resp.text()


async def test_the_row_delete_of_a_fact_asks_through_a_post(local: Local) -> None:
    fact = await FactStore(local.runtime.db).create(
        ALICE, observation(None, "knowledge", "likes jazz"), confidence=0.9, actor="t", now=1.0
    )
    async with http_session() as http:
        csrf = await log_in(http, local.base)
        async with http.get(f"{local.base}/admin/facts/{fact.id}/delete") as resp:
            page = await resp.text()
        assert "likes jazz" in page and TOKEN.search(page) is None
        assert f'action="/admin/facts/{fact.id}/delete"' in page
        async with http.get(f"{local.base}/admin/facts") as resp:
            listing = await resp.text()
        assert f'formaction="/admin/facts/{fact.id}/delete"' in listing
        assert f'href="/admin/facts/{fact.id}/delete"' not in listing
        asked = {"csrf_token": csrf, "back": "/admin/facts"}
        async with http.post(f"{local.base}/admin/facts/{fact.id}/delete", data=asked) as resp:
            assert resp.status == 200
            assert TOKEN.search(await resp.text()) is not None
