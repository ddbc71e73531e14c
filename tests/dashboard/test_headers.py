"""Every kind of answer of ``picobot serve`` carries nosniff, frame protection and a
CSP, and none names aiohttp's version: pages, redirects, static files, aiohttp's own
404 and 405, JSON (and its errors), the event stream and both export downloads (which
are never to be cached)."""

from __future__ import annotations

import asyncio

import aiohttp
from multidict import CIMultiDictProxy

from picobot.admin.headers import SERVER
from tests.dashboard.conftest import ADMIN_KEY, Served, http_session, log_in

API = {"X-API-Key": ADMIN_KEY}


def _check(what: str, headers: CIMultiDictProxy[str]) -> None:
    assert headers.get("X-Content-Type-Options") == "nosniff", what
    assert headers.get("X-Frame-Options") == "DENY", what
    csp = headers.get("Content-Security-Policy", "")
    assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp, what
    assert headers.get("Server") == SERVER, what
    assert "aiohttp" not in str(headers).lower() and "python" not in str(headers).lower()


async def test_every_kind_of_answer_has_the_security_headers(served: Served) -> None:
    await served.chat("my data")
    seen: dict[str, CIMultiDictProxy[str]] = {}
    async with http_session() as http:

        async def get(what: str, path: str, status: int, **kwargs: object) -> None:
            async with http.get(served.base + path, allow_redirects=False, **kwargs) as r:  # type: ignore[arg-type]
                await r.read()
                assert r.status == status, (what, r.status)
                seen[what] = r.headers

        await get("login page", "/admin/login", 200)
        await get("redirect to the login", "/admin/facts", 303)
        await get("stylesheet", "/admin/static/dashboard.css", 200)
        await get("script", "/admin/static/htmx.min.js", 200)
        await get("missing static file", "/admin/static/nothing.js", 404)
        await get("unknown dashboard path", "/admin/nothing", 404)
        await get("unknown path", "/nothing", 404)
        await get("health", "/healthz", 200)
        await get("JSON", "/api/v1/sessions", 200, headers=API)
        await get("JSON error", "/api/v1/sessions", 401)
        await get("API export", "/api/v1/users/ws:alice/export", 200, headers=API)
        async with http.post(served.base + "/healthz") as r:
            assert r.status == 405
            seen["405"] = r.headers
        await log_in(http, served.base)
        await get("dashboard export", "/admin/export?user=ws:alice", 200)
        await get("dashboard page", "/admin/facts", 200)
        async with http.get(served.base + "/admin/logout") as r:
            assert r.status == 405
            seen["dashboard 405"] = r.headers
        timeout = aiohttp.ClientTimeout(sock_read=30)
        async with http.get(
            served.base + "/api/v1/events/stream", headers=API, timeout=timeout
        ) as r:
            assert r.status == 200
            assert await asyncio.wait_for(r.content.readline(), 30) == b": stream open\n"
            seen["event stream"] = r.headers
    for what, headers in seen.items():
        _check(what, headers)
    for export in ("API export", "dashboard export"):
        assert seen[export]["Cache-Control"] == "no-store"
        assert seen[export]["Content-Disposition"].startswith("attachment;")
    for answer in ("JSON", "JSON error", "health", "unknown path", "405"):
        assert seen[answer]["Cache-Control"] == "no-store", answer
    # A page keeps its own policy (its scripts and styles from this site).
    assert "script-src 'self'" in seen["dashboard page"]["Content-Security-Policy"]
    assert "Cache-Control" not in seen["stylesheet"]  # static files may be cached
