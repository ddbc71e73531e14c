"""Screenshots of every dashboard page for docs/dashboard.md (docs/images/dashboard-*.png).

Not part of the normal run: ``PICOBOT_SCREENSHOTS=1 pytest tests/dashboard/test_screenshots.py``
serves seeded data, walks the pages in Chromium and rewrites the images.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.conftest import ADMIN_KEY, Served

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"

pytestmark = pytest.mark.skipif(
    os.environ.get("PICOBOT_SCREENSHOTS") != "1",
    reason="writes docs/images; run with PICOBOT_SCREENSHOTS=1",
)


async def _shot(page: Any, name: str) -> None:
    path = IMAGES / f"dashboard-{name}.png"
    await page.screenshot(path=str(path), scale="css")
    try:  # a 128-colour palette keeps the images small (Pillow comes with the bench extra)
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=128)
    small.save(path, optimize=True)


async def test_screenshots_of_every_page(served: Served, browser: Any) -> None:
    await served.chat("I moved to Lyon last spring and I bake bread on Sundays")
    await served.chat("/remember city: Lyon")
    await served.chat("/remember hobby: baking bread")
    await served.chat("What bread should I try next?")
    await served.add_fact("ws:alice", "preference", "likes sourdough bread", 0.82)
    await served.add_fact("ws:alice", "knowledge", "lives in Lyon", 0.9)
    weak = await served.add_fact("ws:alice", "preference", "dislikes rye", 0.35)
    await served.add_fact("ws:bob", "knowledge", "works night shifts", 0.7)
    IMAGES.mkdir(parents=True, exist_ok=True)
    page = await browser.new_page()
    await page.set_viewport_size({"width": 1100, "height": 680})

    await page.goto(f"{served.base}/admin/login")
    await _shot(page, "login")
    await page.get_by_label("Admin API key").fill(ADMIN_KEY)
    await page.get_by_role("button", name="Log in").click()
    await page.get_by_role("heading", name="Overview").wait_for()
    await _shot(page, "overview")

    await page.goto(f"{served.base}/admin/facts")
    await page.get_by_role("link", name=f"Edit fact {weak.id}").click()
    await page.get_by_label(f"Text of fact {weak.id}").wait_for()
    await _shot(page, "facts")

    await page.goto(f"{served.base}/admin/sessions")
    await _shot(page, "sessions")
    link = page.locator("table.sessions tbody tr td:first-child a").first
    session_id = await link.inner_text()
    await link.click()
    await page.locator("ol.timeline").wait_for()
    await _shot(page, "timeline")

    await page.goto(f"{served.base}/admin/search?user=ws:alice&q=bread+Lyon")
    await _shot(page, "search")

    await page.goto(f"{served.base}/admin/purge?scope=session&target={session_id}")
    await page.get_by_role("button", name="Count what would be deleted").click()
    await page.locator("#purge-plan").wait_for()
    await _shot(page, "purge-confirm")
    await page.get_by_role("button", name="Yes, delete permanently").click()
    await page.locator("#purge-verified").wait_for()
    await _shot(page, "purge-done")
