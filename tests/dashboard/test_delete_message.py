"""The dashboard's delete action on a message of a session's timeline: a purge of that
one message, planned with its counts and executed only when confirmed."""

from __future__ import annotations

import re

from picobot.messages import Identity, Inbound
from tests.dashboard.conftest import Local, http_session, log_in

TOKEN = re.compile(r'name="token" value="([^"]+)"')


async def test_an_operator_deletes_one_message_from_the_timeline(local: Local) -> None:
    kernel = local.runtime.kernel
    turn = Inbound(Identity("generic", "generic:alice", "c1"), "delete me please")
    [session] = {e.session_id async for e in kernel.handle(turn) if e.session_id}
    row = await local.runtime.db.fetchone(
        "SELECT id FROM messages WHERE picobot_open(content) = 'delete me please'"
    )
    assert row is not None
    mid = int(row[0])
    async with http_session() as http:
        csrf = await log_in(http, local.base)
        async with http.get(f"{local.base}/admin/sessions/{session}") as resp:
            page = await resp.text()
        link = f"/admin/purge?scope=message&amp;target={mid}"
        assert link in page
        async with http.get(f"{local.base}{link.replace('&amp;', '&')}") as resp:
            assert 'value="message" checked' in await resp.text()
        bad = {"csrf_token": csrf, "scope": "message", "target": "12x"}
        async with http.post(f"{local.base}/admin/purge", data=bad) as resp:
            assert resp.status == 400 and "A message id is a number" in await resp.text()
        plan = {"csrf_token": csrf, "scope": "message", "target": str(mid)}
        async with http.post(f"{local.base}/admin/purge", data=plan) as resp:
            text = await resp.text()
        assert f"message {mid}" in text
        token = TOKEN.search(text)
        assert token is not None
        confirm = {"csrf_token": csrf, "token": token.group(1), "answer": "yes"}
        async with http.post(f"{local.base}/admin/purge/confirm", data=confirm) as resp:
            assert resp.status == 200, await resp.text()
    rows = await local.runtime.db.fetchall("SELECT picobot_open(content) FROM messages")
    assert [str(r[0]) for r in rows] == ["You said: delete me please"]
