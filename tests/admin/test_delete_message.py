"""``DELETE /api/v1/messages/{id}``: an operator deletes one message, two-step like a purge."""

from __future__ import annotations

from tests.admin.helpers import ALICE, KEY_B, Api


async def texts(api: Api) -> list[str]:
    rows = await api.runtime.db.fetchall("SELECT picobot_open(content) FROM messages ORDER BY id")
    return [str(r[0]) for r in rows]


async def test_an_operator_deletes_one_message_after_confirming(chatted: Api) -> None:
    row = await chatted.runtime.db.fetchone(
        "SELECT id FROM messages WHERE picobot_open(content) = 'tell me about volcanoes'"
    )
    assert row is not None
    mid = int(row[0])
    before = len(await texts(chatted))
    planned = await chatted.call("DELETE", f"/api/v1/messages/{mid}")
    plan = planned["plan"]
    assert plan["scope"] == "message" and plan["message_id"] == mid
    assert plan["counts"]["messages"] == 1 and f"message {mid}" in plan["prompt"]
    token = planned["confirm_token"]
    confirm = f"/api/v1/purge/{token}/confirm"
    # Bound to the key that planned it.
    await chatted.call("POST", confirm, key=KEY_B, body={"answer": "y"}, expect=404)
    assert len(await texts(chatted)) == before
    done = await chatted.call("POST", confirm, body={"answer": "y"})
    assert done["deleted"]["messages"] == 1
    left = await texts(chatted)
    assert "tell me about volcanoes" not in left and len(left) == before - 1
    # Single use.
    await chatted.call("POST", confirm, body={"answer": "y"}, expect=404)
    # The same scope through POST /api/v1/purge.
    row = await chatted.runtime.db.fetchone("SELECT MIN(id) FROM messages")
    assert row is not None
    body = {"scope": "message", "message_id": int(row[0])}
    again = await chatted.call("POST", "/api/v1/purge", body=body)
    assert again["plan"]["counts"]["messages"] == 1


async def test_an_unknown_or_malformed_message_id_is_not_found(chatted: Api) -> None:
    for bad in ("999999", "0", "abc", "1e3", "99999999999999999999999"):
        got = await chatted.call("DELETE", f"/api/v1/messages/{bad}", expect=404)
        assert got["error"]["code"] == "not_found"
    assert await chatted.chat(ALICE, "still here")
