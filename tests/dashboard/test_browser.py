"""End to end in a real browser: headless Chromium (Debian's, through Playwright)
against a real ``picobot serve``. An operator logs in, filters facts, edits one inline,
bulk-deletes two, watches a memory and a fact appear while the page is open, reads a
session's timeline, purges it with confirmation and logs out; forged and stolen
requests are refused inside the same browser."""

from __future__ import annotations

import re
from typing import Any

from picobot.runtime import open_database
from picobot.store.learned.facts import FactFilter, find_facts
from tests.dashboard.conftest import ADMIN_KEY, Served

LIVE_WAIT_MS = 20_000
"""Bound on how long a polled change may take to show (the page polls every 3 s)."""


async def _facts(served: Served) -> dict[int, Any]:
    async with open_database(served.settings) as db:
        found = await db.read(lambda c: find_facts(c, FactFilter(), None))
    return {f.id: f for f in found}


async def test_an_operator_curates_purges_and_logs_out(served: Served, browser: Any) -> None:
    from playwright.async_api import expect

    assert await served.chat("I like tea") == "You said: I like tea"
    tea = await served.add_fact("ws:alice", "preference", "likes green tea", 0.8)
    jazz = await served.add_fact("ws:alice", "preference", "likes jazz", 0.7)
    opera = await served.add_fact("ws:alice", "preference", "likes opera", 0.6)
    city = await served.add_fact("ws:alice", "knowledge", "lives in Lyon", 0.9)

    page = await browser.new_page()
    polls: list[dict[str, str]] = []
    page.on(
        "request",
        lambda r: polls.append(r.headers) if "/admin/facts/rows" in r.url else None,
    )
    await page.goto(f"{served.base}/admin/facts")
    # No login: the login form, not the facts.
    await expect(page).to_have_url(re.compile(r"/admin/login$"))
    assert await page.locator("text=likes green tea").count() == 0
    await page.get_by_label("Admin API key").fill(ADMIN_KEY)
    await page.get_by_role("button", name="Log in").click()
    await expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    await expect(page.locator("#count-facts")).to_have_text("4 (4)")

    # Filter: only the preferences.
    await page.get_by_role("link", name="Facts and memories").click()
    await page.get_by_label("Category").fill("preference")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator("#fact-rows tr")).to_have_count(3)
    await expect(page.locator(f"#fact-{city.id}")).to_have_count(0)

    # Inline edit (htmx swaps the row for a form and back).
    await page.get_by_role("link", name=f"Edit fact {tea.id}").click()
    await page.get_by_label(f"Confidence of fact {tea.id}").fill("2")
    await page.get_by_role("button", name="Save").click()
    # Refused in the row itself (the form stays, with the reason); nothing stored.
    await expect(page.locator(f"#fact-{tea.id} [role=alert]")).to_contain_text("between 0 and 1")
    assert (await _facts(served))[tea.id].confidence == 0.8
    await page.get_by_label(f"Text of fact {tea.id}").fill("likes oolong tea")
    await page.get_by_label(f"Confidence of fact {tea.id}").fill("0.95")
    await page.get_by_role("button", name="Save").click()
    row = page.locator(f"#fact-{tea.id}")
    await expect(row).to_contain_text("likes oolong tea")
    await expect(row).to_contain_text("0.95")
    stored = await _facts(served)
    assert stored[tea.id].text == "likes oolong tea"
    assert stored[tea.id].confidence == 0.95

    # Bulk delete two, after a confirmation page that names them.
    await page.get_by_label(f"Select fact {jazz.id}").check()
    await page.get_by_label(f"Select fact {opera.id}").check()
    await page.get_by_role("button", name="Delete…").click()
    await expect(page.get_by_role("heading", name="Delete 2 facts?")).to_be_visible()
    await page.get_by_role("button", name="Delete permanently").click()
    await expect(page.locator("#fact-rows tr")).to_have_count(1)
    assert set(await _facts(served)) == {tea.id, city.id}

    # Live: a memory saved in a chat turn and a fact written meanwhile both show up
    # without a reload (the listings poll).
    await page.get_by_role("link", name="Clear filters").click()
    await expect(page.locator("#fact-rows tr")).to_have_count(2)
    reply = await served.chat("/remember drink: oolong tea")
    assert "drink" in reply
    fresh = await served.add_fact("ws:alice", "knowledge", "works as a baker", 0.85)
    await expect(page.locator("#memory-rows")).to_contain_text("oolong tea", timeout=LIVE_WAIT_MS)
    await expect(page.locator(f"#fact-{fresh.id}")).to_contain_text(
        "works as a baker", timeout=LIVE_WAIT_MS
    )
    # Each refresh says it is one, so an unattended tab still reaches the idle limit.
    assert polls and all(h.get("x-dashboard-poll") == "1" for h in polls)

    # A deactivated fact stays listed, greyed.
    await page.get_by_label(f"Select fact {city.id}").check()
    await page.get_by_role("button", name="Deactivate").click()
    await expect(page.locator(f"#fact-{city.id}")).to_have_class("inactive")
    assert not (await _facts(served))[city.id].active

    # Forged writes from this very browser: without the token, or a wrong one.
    for headers in ("{}", "{'X-CSRF-Token': 'forged'}"):
        status = await page.evaluate(
            "fetch('/admin/facts/delete', {method: 'POST', headers: " + headers + ","
            f" body: new URLSearchParams({{ids: '{fresh.id}', confirm: 'yes'}})}})"
            ".then(r => r.status)"
        )
        assert status == 403
    assert fresh.id in await _facts(served)

    # The session's timeline, from the sessions list.
    await page.get_by_role("link", name="Sessions", exact=True).click()
    await expect(page.locator("table.sessions")).to_contain_text("I like tea")
    session_link = page.locator("table.sessions tbody tr td:first-child a").first
    session_id = await session_link.inner_text()
    await session_link.click()
    await expect(page.get_by_role("heading", name=f"Session {session_id}")).to_be_visible()
    timeline = page.locator("ol.timeline")
    await expect(timeline).to_contain_text("I like tea")
    await expect(timeline).to_contain_text("You said: I like tea")
    texts = await timeline.locator("li .body").all_inner_texts()
    assert texts.index("I like tea") < texts.index("You said: I like tea")

    # Purge that session: counts first, then the confirmed result, verified.
    await page.get_by_role("link", name="Purge this session…").click()
    await expect(
        page.get_by_label("Session id, user id, message id or number of days")
    ).to_have_value(session_id)
    await page.get_by_role("button", name="Count what would be deleted").click()
    plan = page.locator("#purge-plan")
    await expect(plan).to_contain_text("sessions")
    assert "1" in await plan.locator("tr", has_text="sessions").inner_text()
    await page.get_by_role("button", name="Yes, delete permanently").click()
    await expect(page.locator("#purge-result")).to_contain_text(f"Deleted session {session_id}")
    await expect(page.locator("#purge-verified")).to_contain_text("nothing of session")
    await expect(page.locator("#purge-verified")).to_contain_text("residue was erased")

    # Log out; the old cookie, put back, opens nothing.
    cookies = await browser.cookies()
    assert [c["name"] for c in cookies] == ["picobot_dashboard"]
    assert cookies[0]["httpOnly"] and cookies[0]["sameSite"] == "Strict"
    await page.get_by_role("button", name="Log out").click()
    await expect(page).to_have_url(re.compile(r"/admin/login$"))
    assert await browser.cookies() == []
    await browser.add_cookies(cookies)
    await page.goto(f"{served.base}/admin/facts")
    await expect(page).to_have_url(re.compile(r"/admin/login$"))
    assert await page.locator("text=works as a baker").count() == 0


async def test_a_user_id_with_a_bidi_override_is_shown_marked(served: Served, browser: Any) -> None:
    """``generic:\\u202enimda`` would draw as ``generic:admin``; the browser shows the
    override as a marked ``\\u202E`` instead, and the id reads as what it is."""
    from playwright.async_api import expect

    spoof = await served.add_fact("generic:\u202enimda", "knowledge", "likes tea", 0.8)
    page = await browser.new_page()
    await page.goto(f"{served.base}/admin/login")
    await page.get_by_label("Admin API key").fill(ADMIN_KEY)
    await page.get_by_role("button", name="Log in").click()
    await expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    await page.goto(f"{served.base}/admin/facts")
    cell = page.locator(f"#fact-{spoof.id} td").nth(2)
    await expect(cell).to_have_text("generic:\\u202Enimda")
    mark = cell.locator(".hidden-char")
    await expect(mark).to_be_visible()
    await expect(mark).to_have_attribute("title", "U+202E RIGHT-TO-LEFT OVERRIDE")
    assert "admin" not in await cell.inner_text()
