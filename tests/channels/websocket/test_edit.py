"""/edit over a real WebSocket server on loopback: the branch's reply streams like any
reply, the ``history`` frame then shows the branch, and the old version stays."""

from __future__ import annotations

import json

from tests.channels.websocket.test_server import (
    KEY_A,
    KEY_B,
    USER_A,
    USER_B,
    Server,
    chat,
    types,
    until_end,
)


async def test_edit_over_websocket_streams_the_new_answer_in_a_branch(server: Server) -> None:
    alice, _ = await server.client(KEY_A)
    async with alice:
        await chat(alice, "keep this")
        first = await chat(alice, "a typo here")
        old = first[0]["session_id"]
        edited = await chat(alice, "/edit no typo here", id="e")
        kinds = types(edited)
        assert kinds[0] == "notice" and f"/resume {old}" in edited[0]["text"]
        assert kinds[1] == "session" and kinds[-1] == "done" and "token" in kinds
        branch = edited[1]["session_id"]
        assert branch != old
        assert edited[-1]["text"] == "You said: no typo here"
        assert all(f["reply_to"] == "e" for f in edited)
        await alice.send(json.dumps({"type": "history", "id": "h"}))
        shown = await until_end(alice, "h")
    assert shown[0]["session_id"] == branch
    assert [m["content"] for m in shown[0]["messages"]] == [
        "keep this",
        "You said: keep this",
        "no typo here",
        "You said: no typo here",
    ]
    # The old version is still there, as it was, a session of the same user.
    rows = await server.runtime.db.fetchall(
        "SELECT picobot_open(content) FROM messages WHERE session_id = ? ORDER BY seq_order", (old,)
    )
    assert [r[0] for r in rows] == ["keep this", "You said: keep this", "a typo here",
                                    "You said: a typo here"]  # fmt: skip


async def test_edit_of_another_users_message_over_websocket_is_refused(server: Server) -> None:
    alice, _ = await server.client(KEY_A)
    bob, _ = await server.client(KEY_B)
    async with alice, bob:
        await chat(bob, "bob's secret plan")
        bob_session, _ = await server.stored(USER_B)
        row = await server.runtime.db.fetchone(
            "SELECT id FROM messages WHERE picobot_open(content) = 'bob''s secret plan'"
        )
        assert row is not None
        await chat(alice, "hello")
        refused = await chat(alice, f"/edit {row[0]} alice's plan now", id="x")
    assert types(refused) == ["error"]
    assert refused[0]["message"] == "There is no such message of yours."
    assert bob_session is not None and bob_session not in json.dumps(refused)
    assert (await server.stored(USER_A))[1][-1] == ("assistant", "You said: hello")
    assert (await server.stored(USER_B))[1][0] == ("user", "bob's secret plan")
