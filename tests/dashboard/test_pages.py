"""The pages' behaviour over real HTTP against ``picobot serve``: export, memory
deletion, refused edits, purge cancel and refusal, filters, escaping, and the switch."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import aiohttp

from picobot.runtime import open_database
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.learned.facts import get_fact
from tests.cli.test_serve import free_port, start_subprocess, stop_subprocess, wait_healthy
from tests.dashboard.conftest import ADMIN_KEY, Served, http_session, log_in


async def test_export_downloads_the_users_jsonl(served: Served) -> None:
    await served.chat("export me please")
    async with http_session() as http:
        await log_in(http, served.base)
        async with http.get(f"{served.base}/admin/export?user=ws:alice") as resp:
            assert resp.status == 200
            assert resp.headers["Content-Disposition"].startswith("attachment;")
            lines = [json.loads(x) for x in (await resp.text()).splitlines()]
        assert any("export me please" in json.dumps(x) for x in lines)
        async with http.get(f"{served.base}/admin/export?user=nobody") as resp:
            assert resp.status == 404
            assert "Nothing is stored about this user." in await resp.text()


async def test_a_memory_is_deleted_only_after_its_confirmation(served: Served) -> None:
    await served.chat("/remember pet: a cat named Tom")
    async with http_session() as http:
        csrf = await log_in(http, served.base)
        query = {"user": "ws:alice", "key": "pet"}
        async with http.get(f"{served.base}/admin/memories/delete", params=query) as resp:
            page = await resp.text()
            assert "a cat named Tom" in page and "Delete permanently" in page
        async with http.post(
            f"{served.base}/admin/memories/delete", data={**query, "csrf_token": csrf}
        ) as resp:
            assert resp.status == 200  # no confirm=yes: back to the list, nothing deleted
        assert await _memory(served, "pet") is not None
        async with http.post(
            f"{served.base}/admin/memories/delete",
            data={**query, "csrf_token": csrf, "confirm": "yes"},
        ) as resp:
            assert resp.status == 200
    assert await _memory(served, "pet") is None


async def _memory(served: Served, key: str) -> object:
    async with open_database(served.settings) as db:
        return await MemoryRepo(db).get("ws:alice", key)


async def test_a_bad_edit_is_answered_and_changes_nothing(served: Served) -> None:
    fact = await served.add_fact("ws:alice", "knowledge", "likes <b>bold</b> tea", 0.5)
    async with http_session() as http:
        csrf = await log_in(http, served.base)
        url = f"{served.base}/admin/facts/{fact.id}"
        for form, message in [
            ({"text": "new text", "confidence": "1.5"}, "Confidence must be between 0 and 1"),
            ({"text": "new text", "confidence": "lots"}, "Confidence must be a number"),
            ({"text": "  ", "confidence": "0.5"}, ""),
        ]:
            headers = {"HX-Request": "true", "X-CSRF-Token": csrf}
            async with http.post(url, data=form, headers=headers) as resp:
                assert resp.status == 400
                body = await resp.text()
                assert message in body
                assert 'class="editing"' in body  # the row's form again, with the error
        async with http.get(f"{served.base}/admin/facts") as resp:
            page = await resp.text()
        # Stored text is shown as text, never as markup.
        assert "likes &lt;b&gt;bold&lt;/b&gt; tea" in page and "<b>bold</b>" not in page
        async with http.post(f"{served.base}/admin/facts/999999", data={"csrf_token": csrf}) as r:
            assert r.status == 404
    async with open_database(served.settings) as db:
        stored = await db.read(lambda c: get_fact(c, fact.id))
    assert stored == fact


async def test_purges_cancel_and_refuse_cleanly(served: Served) -> None:
    await served.chat("keep this")
    async with http_session() as http:
        csrf = await log_in(http, served.base)
        async with http.post(
            f"{served.base}/admin/purge",
            data={"csrf_token": csrf, "scope": "session", "target": "nosuchsession"},
        ) as resp:
            assert resp.status == 400
            assert "There is no session nosuchsession." in await resp.text()
        async with http.post(
            f"{served.base}/admin/purge",
            data={"csrf_token": csrf, "scope": "older", "target": "0"},
        ) as resp:
            assert resp.status == 400
        async with http.post(
            f"{served.base}/admin/purge",
            data={"csrf_token": csrf, "scope": "user", "target": "ws:alice"},
        ) as resp:
            page = await resp.text()
        token = re.search(r'name="token" value="([^"]+)"', page)
        assert token is not None
        assert re.search(r"<th scope=\"row\">messages</th><td>2</td>", page)
        confirm = {"csrf_token": csrf, "token": token.group(1)}
        async with http.post(
            f"{served.base}/admin/purge/confirm", data={**confirm, "answer": "no"}
        ) as resp:
            assert "Nothing was deleted." in await resp.text()
        # The token was single use: a yes after the no deletes nothing either.
        async with http.post(
            f"{served.base}/admin/purge/confirm", data={**confirm, "answer": "yes"}
        ) as resp:
            assert resp.status == 400
        async with http.get(f"{served.base}/admin/sessions") as resp:
            assert "keep this" in await resp.text()


async def test_filters_narrow_the_rows_and_bad_bounds_are_reported(served: Served) -> None:
    await served.add_fact("ws:alice", "preference", "likes rain", 0.9)
    await served.add_fact("ws:bob", "preference", "likes snow", 0.3)
    async with http_session() as http:
        await log_in(http, served.base)
        async with http.get(f"{served.base}/admin/facts/rows?user=ws:bob") as resp:
            rows = await resp.text()
        assert "likes snow" in rows and "likes rain" not in rows
        async with http.get(f"{served.base}/admin/facts?min=0.5&max=x") as resp:
            page = await resp.text()
        assert "likes rain" in page and "likes snow" not in page
        assert "Maximum confidence must be a number from 0 to 1" in page


async def test_the_dashboard_can_be_switched_off(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PICOBOT_DATA__DIR": str(tmp_path / "data"),
        "PICOBOT_LLM__PROVIDER": "scripted",
        "PICOBOT_SERVER__PORT": str(port),
        "PICOBOT_ADMIN_API_KEYS": ADMIN_KEY,
        "PICOBOT_SERVER__ENABLE_DASHBOARD": "false",
    }
    proc = start_subprocess(tmp_path, env)
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_healthy(f"{base}/healthz", proc)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/admin/login") as resp:
                assert resp.status == 404
            async with http.get(f"{base}/api/v1/sessions", headers={"X-API-Key": ADMIN_KEY}) as r:
                assert r.status == 200
    finally:
        await stop_subprocess(proc)
    assert proc.returncode == 0


async def test_the_overview_says_whether_the_bot_learns_and_with_which_model(
    served: Served,
) -> None:
    async with http_session() as http:
        await log_in(http, served.base)
        async with http.get(f"{served.base}/admin/") as resp:
            page = await resp.text()
    assert re.search(r'id="learning-state">on, with scripted:default model<', page), page
