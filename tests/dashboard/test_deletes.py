"""Deleting and choosing from the dashboard over real HTTP against ``picobot serve``:
fact deletes are purges (no byte of the text is left in any file; recorded and counted
as purges by the operator), memory deletes name the operator, bad or oversized
selections and numbers are refused with a clear error and change nothing, and long
timeline bodies are cut."""

from __future__ import annotations

import random
import re

import aiohttp
import pytest

from picobot.dashboard.views_facts import MAX_SELECTED
from picobot.runtime import open_database
from picobot.store.conversation.events import Event, EventFilter, list_events
from picobot.store.learned.facts import FactFilter, find_facts
from tests.dashboard.conftest import ADMIN_KEY, Served, http_session, log_in
from tests.privacy.test_erasure import new_marker, scan

OPERATOR = f"api:{ADMIN_KEY[:8]}"
TOKEN = re.compile(r'name="token" value="([^"]+)"')
BAD_NUMBERS = ["²", "1" * 25]
"""``str.isdigit`` accepts the first; the second overflows SQLite's integers."""


async def _events(served: Served) -> list[Event]:
    async with open_database(served.settings) as db:
        return await db.read(lambda c: list_events(c, EventFilter(), 10_000))


async def _active(served: Served) -> dict[int, bool]:
    async with open_database(served.settings) as db:
        found = await db.read(lambda c: find_facts(c, FactFilter(), None))
    return {f.id: f.active for f in found}


async def _confirm(http: aiohttp.ClientSession, served: Served, csrf: str, page: str) -> str:
    """Press *Delete permanently* on a confirmation page; the listing it leads back to."""
    token = TOKEN.search(page)
    assert token is not None, page
    form = {"csrf_token": csrf, "token": token.group(1), "confirm": "yes", "back": "/admin/facts"}
    async with http.post(f"{served.base}/admin/facts/delete", data=form) as resp:
        assert resp.status == 200 and str(resp.url).endswith("/admin/facts")
        return await resp.text()


async def test_deleted_facts_leave_no_byte_in_any_file_and_are_purges_by_the_operator(
    served: Served,
) -> None:
    rng = random.Random(7)
    gone = [new_marker(rng) for _ in range(3)]
    kept = new_marker(rng)
    one, two, three = [await served.add_fact("ws:alice", "knowledge", m, 0.9) for m in gone]
    await served.add_fact("ws:alice", "knowledge", kept, 0.9)
    async with http_session() as http:
        csrf = await log_in(http, served.base)
        # One fact, from its row's Delete (a POST; the GET only shows the button).
        async with http.get(f"{served.base}/admin/facts/{one.id}/delete") as resp:
            assert "Delete 1 fact?" in await resp.text()
        form = {"csrf_token": csrf, "back": "/admin/facts"}
        async with http.post(f"{served.base}/admin/facts/{one.id}/delete", data=form) as resp:
            page = await resp.text()
        assert "Delete 1 fact?" in page and gone[0] in page
        listing = await _confirm(http, served, csrf, page)
        assert gone[0] not in listing and kept in listing
        # Two, selected for the bulk Delete.
        bulk = {"csrf_token": csrf, "action": "delete", "back": "/admin/facts"}
        async with http.post(
            f"{served.base}/admin/facts/bulk",
            data=[*bulk.items(), ("ids", str(two.id)), ("ids", str(three.id))],
        ) as resp:
            page = await resp.text()
        assert "Delete 2 facts?" in page
        await _confirm(http, served, csrf, page)
        async with http.get(f"{served.base}/metrics", headers={"X-API-Key": ADMIN_KEY}) as resp:
            metrics = await resp.text()
    assert 'picobot_purges_total{scope="facts"} 2.0' in metrics
    assert scan(served.data_dir, gone) == {}
    # The kept fact is listed above; in the files it is sealed, like the deleted ones were.
    assert scan(served.data_dir, [kept]) == {}
    events = await _events(served)
    purges = [e for e in events if e.type == "purge.completed"]
    assert [(e.actor, e.payload["scope"], e.payload["counts"]["facts"]) for e in purges] == [
        (OPERATOR, "facts", 1),
        (OPERATOR, "facts", 2),
    ]
    # What happened to the deleted facts went with them; nothing says "the user did it".
    assert not [e for e in events if e.type == "fact.deleted"]


async def test_a_used_or_cancelled_confirmation_deletes_nothing(served: Served) -> None:
    fact = await served.add_fact("ws:alice", "knowledge", "keep me", 0.9)
    async with http_session() as http:
        csrf = await log_in(http, served.base)
        asked = {"csrf_token": csrf}
        async with http.post(f"{served.base}/admin/facts/{fact.id}/delete", data=asked) as resp:
            token = TOKEN.search(await resp.text())
        assert token is not None
        form = {"csrf_token": csrf, "token": token.group(1), "back": "/admin/facts"}
        for _ in range(2):  # Cancel, and again (nothing left to cancel): back to the listing
            async with http.post(f"{served.base}/admin/facts/delete", data=form) as resp:
                assert resp.status == 200 and str(resp.url).endswith("/admin/facts")
        async with http.post(
            f"{served.base}/admin/facts/delete", data={**form, "confirm": "yes"}
        ) as resp:
            assert resp.status == 400  # the token was used by the cancel
            said = await resp.text()
        assert "There is no pending purge with that confirmation" in said
    assert fact.id in await _active(served)


async def test_a_memory_delete_names_the_operator(served: Served) -> None:
    await served.chat("/remember pet: a cat named Tom")
    async with http_session() as http:
        csrf = await log_in(http, served.base)
        form = {"user": "ws:alice", "key": "pet", "csrf_token": csrf, "confirm": "yes"}
        async with http.post(f"{served.base}/admin/memories/delete", data=form) as resp:
            assert resp.status == 200
    [deleted] = [e for e in await _events(served) if e.type == "memory.deleted"]
    assert deleted.actor == OPERATOR and deleted.user_id == "ws:alice"


@pytest.mark.parametrize("bad", BAD_NUMBERS)
async def test_bad_numbers_are_refused_with_a_clear_error(served: Served, bad: str) -> None:
    fact = await served.add_fact("ws:alice", "knowledge", "stays active", 0.9)
    async with http_session() as http:
        csrf = await log_in(http, served.base)
        form = [("csrf_token", csrf), ("action", "deactivate"), ("ids", str(fact.id)), ("ids", bad)]
        async with http.post(f"{served.base}/admin/facts/bulk", data=form) as resp:
            assert resp.status == 400
            assert "Fact ids are whole numbers" in await resp.text()
        for path in (f"/admin/facts/{bad}/edit", f"/admin/facts/{bad}/delete"):
            async with http.get(served.base + path) as resp:
                assert resp.status == 404, path
        async with http.get(f"{served.base}/admin/sessions", params={"offset": bad}) as resp:
            assert resp.status == 400
            assert "The offset must be a whole number" in await resp.text()
        purge = {"csrf_token": csrf, "scope": "older", "target": bad}
        async with http.post(f"{served.base}/admin/purge", data=purge) as resp:
            assert resp.status == 400
            assert "The number of days must be from 1 to" in await resp.text()
    assert (await _active(served))[fact.id] is True


async def test_a_route_id_in_another_scripts_digits_names_no_fact(served: Served) -> None:
    fact = await served.add_fact("ws:alice", "knowledge", "only by its own id", 0.9)
    arabic = chr(0x0660 + fact.id) if fact.id < 10 else "٣"
    async with http_session() as http:
        await log_in(http, served.base)
        async with http.get(f"{served.base}/admin/facts/{arabic}/edit") as resp:
            assert resp.status == 404
            assert "only by its own id" not in await resp.text()


async def test_a_selection_larger_than_a_listing_is_refused(served: Served) -> None:
    fact = await served.add_fact("ws:alice", "knowledge", "stays active", 0.9)
    head = [("action", "deactivate")]
    async with http_session() as http:
        csrf = await log_in(http, served.base)
        for count, status, said in [
            (MAX_SELECTED + 1, 400, f"Select at most {MAX_SELECTED} facts at once"),
            (2000, 413, "The form was too large to read. Nothing was changed."),
        ]:
            form = [("csrf_token", csrf), *head, *[("ids", str(fact.id))] * count]
            async with http.post(f"{served.base}/admin/facts/bulk", data=form) as resp:
                assert resp.status == status
                assert said in await resp.text()
        assert (await _active(served))[fact.id] is True
        form = [("csrf_token", csrf), *head, *[("ids", str(fact.id))] * MAX_SELECTED]
        async with http.post(f"{served.base}/admin/facts/bulk", data=form) as resp:
            assert resp.status == 200
    assert (await _active(served))[fact.id] is False


async def test_the_timeline_cuts_long_bodies_and_says_so(served: Served) -> None:
    said = "beginning " + "x" * 4990 + " theveryend"
    await served.chat(said)
    async with http_session() as http:
        await log_in(http, served.base)
        async with http.get(f"{served.base}/admin/sessions") as resp:
            found = re.search(r'href="/admin/sessions/([^"]+)"', await resp.text())
        assert found is not None
        async with http.get(f"{served.base}/admin/sessions/{found.group(1)}") as resp:
            page = await resp.text()
    assert "beginning" in page
    assert "theveryend" not in page  # neither in the message nor in the echoed reply
    assert page.count("more characters not shown") == 2


async def test_the_listings_polls_say_they_are_polls(served: Served) -> None:
    async with http_session() as http:
        await log_in(http, served.base)
        async with http.get(f"{served.base}/admin/facts") as resp:
            page = await resp.text()
    polled = re.findall(r"<tbody[^>]*data-poll[^>]*>", page)
    assert len(polled) == 2
    assert all("""hx-headers='{"X-Dashboard-Poll": "1"}'""" in tag for tag in polled)
