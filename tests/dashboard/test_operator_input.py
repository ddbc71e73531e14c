"""What an operator types cannot forge a log line or split a header: the purge target,
the export's user and a memory's user are logged escaped, and a ``back`` field with a
line break, a scheme or a host is answered with a clean redirect to the listing (the
edit is stored once, nothing is logged as an error, the connection stays usable)."""

from __future__ import annotations

import logging
import time

import pytest

from picobot.dashboard.render import see_other
from picobot.dashboard.views_facts import local_listing
from picobot.store.learned.fact_rules import observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.learned.facts import get_fact
from tests.dashboard.conftest import Local, http_session, log_in

FORGED = "\r\n2026-11-28 INFO picobot.privacy.controller: purge executed: FORGED"
BAD_BACKS = [
    "/admin/facts\r\nSet-Cookie: evil=1",
    "/admin/facts\nLocation: https://evil.example/",
    "/admin/facts?user=a\r\n",
    "https://evil.example/admin/facts",
    "//evil.example/admin/facts",
    "/\\evil.example/admin/facts",
    "/admin/facts/../../elsewhere",
    "/admin/facts\u2028x",
    "javascript:alert(1)",
]


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


@pytest.mark.parametrize("back", BAD_BACKS)
def test_only_the_listing_of_this_site_is_a_way_back(back: str) -> None:
    assert not local_listing(back)
    # Any redirect goes to a path of this site, on one header line.
    location = see_other(back).headers["Location"]
    assert location in ("/admin/", back) and location.isprintable() and "evil" not in location


def test_the_listing_with_its_filters_is_a_way_back() -> None:
    for good in ("/admin/facts", "/admin/facts?user=ws%3Aalice&active=no"):
        assert local_listing(good)
        assert see_other(good).headers["Location"] == good


async def test_a_line_break_in_back_is_answered_cleanly(
    local: Local, caplog: pytest.LogCaptureFixture
) -> None:
    fact = await FactStore(local.runtime.db).create(
        "telegram:42",
        observation(None, "knowledge", "likes tea"),
        confidence=0.5,
        actor="t",
        now=time.time(),
    )
    caplog.set_level(logging.INFO)
    async with http_session() as http:
        csrf = await log_in(http, local.base)
        for number, back in enumerate(BAD_BACKS):
            form = {"csrf_token": csrf, "text": f"likes tea {number}", "confidence": "0.5"}
            async with http.post(
                f"{local.base}/admin/facts/{fact.id}",
                data={**form, "back": back},
                allow_redirects=False,
            ) as resp:
                assert resp.status == 303, back
                assert resp.headers["Location"] == "/admin/facts"
                assert "evil" not in str(resp.headers)
            stored = await local.runtime.db.read(lambda c: get_fact(c, fact.id))
            assert stored is not None and stored.text == f"likes tea {number}"
        # The same connection still serves the operator.
        async with http.get(f"{local.base}/admin/facts") as resp:
            assert resp.status == 200
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_what_the_operator_typed_is_logged_escaped(
    local: Local, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with http_session() as http:
        csrf = await log_in(http, local.base)
        purge = {"csrf_token": csrf, "scope": "user", "target": "mallory" + FORGED}
        async with http.post(f"{local.base}/admin/purge", data=purge) as resp:
            assert resp.status == 200
        gone = {"csrf_token": csrf, "user": "x" + FORGED, "key": "k", "confirm": "yes"}
        async with http.post(f"{local.base}/admin/memories/delete", data=gone) as resp:
            assert resp.status == 200
        async with http.get(f"{local.base}/admin/export", params={"user": "y" + FORGED}) as r:
            assert r.status == 404
    lines = _lines(caplog)
    planned = [line for line in lines if "planned a purge" in line]
    assert planned and all("\n" not in line and "\r" not in line for line in planned)
    assert "mallory\\x0d\\x0a2026-11-28 INFO" in planned[0]
    assert all("\n" not in line and "\r" not in line for line in lines), lines
