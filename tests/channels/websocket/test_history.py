"""/undo over a real WebSocket server on loopback: the confirm_request frame states the
counts, only the user's own ``confirm`` frame with its token executes it."""

from __future__ import annotations

import json

from tests.channels.websocket.test_server import (
    KEY_A,
    KEY_B,
    USER_A,
    Server,
    chat,
    types,
    until_end,
)


async def test_undo_over_websocket_asks_then_removes_the_last_exchange(server: Server) -> None:
    alice, _ = await server.client(KEY_A)
    bob, _ = await server.client(KEY_B)
    async with alice, bob:
        await chat(alice, "keep this")
        await chat(alice, "take this back")
        asked = await chat(alice, "/undo", id="u")
        assert types(asked) == ["confirm_request"]
        token = asked[0]["token"]
        prompt = asked[0]["prompt"]
        assert "the last exchange" in prompt and "2 messages" in prompt
        assert "keeps" not in prompt  # PicoBot's own client keeps no copy of its own
        # A chat "y" is chat here, never the answer; another user's token use fails.
        await bob.send(json.dumps({"type": "confirm", "token": token, "answer": "y", "id": "b"}))
        assert "Deleted" not in json.dumps(await until_end(bob, "b"))
        assert len((await server.stored(USER_A))[1]) == 4
        await alice.send(json.dumps({"type": "confirm", "token": token, "answer": "y", "id": "y"}))
        done = await until_end(alice, "y")
    assert types(done) == ["notice"] and done[0]["text"].startswith("Deleted the last exchange")
    _, stored = await server.stored(USER_A)
    assert stored == [("user", "keep this"), ("assistant", "You said: keep this")]
