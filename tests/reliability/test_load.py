"""100 WebSocket clients at once against a real server: no error, nothing lost, nothing twice.

Real: the WebSocket channel on 127.0.0.1:0, the websockets client library, the kernel
assembled by ``open_runtime`` over a SQLite file, and 100 concurrent connections, each
with its own API key (so 100 users, 100 sessions, one serialized database writer).
Stand-in: the model is the scripted provider (it echoes). The test counts turns, not
time: each client pipelines ``TURNS`` messages (with the default limits) and reads
until each one has ended.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from picobot.channels.websocket.connection import RATE_BURST
from picobot.channels.websocket.server import WebSocketChannel
from picobot.config.channels import WebSocketSettings
from picobot.config.settings import DataSettings, Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.runtime import open_runtime

from .conftest import SAFETY, query

CLIENTS = 100
TURNS = RATE_BURST
"""Messages each client pipelines: a full burst, so the default rate limit admits all."""


def key(i: int) -> str:
    return f"load-test-key-{i:03d}-0123456789"


def peer(i: int) -> str:
    """The loopback address client ``i`` connects from: 25 per address, as 100 users on
    four networks would, within the default per-address connection cap."""
    return f"127.0.0.{2 + i % 4}"


async def converse(ws: ClientConnection, i: int) -> list[dict[str, Any]]:
    """Send every message at once, then read until each has its ``end``; return all frames."""
    for n in range(TURNS):
        text = f"client {i} message {n}"
        await ws.send(json.dumps({"type": "chat", "text": text, "id": f"{i}-{n}"}))
    frames: list[dict[str, Any]] = []
    ended = 0
    while ended < TURNS:
        frame = json.loads(await ws.recv())
        frames.append(frame)
        ended += frame["type"] == "end"
    return frames


async def test_hundred_clients_every_turn_answered_and_stored_once(tmp_path: Path) -> None:
    settings = Settings(data=DataSettings(dir=str(tmp_path / "data")))
    ws_settings = WebSocketSettings(enabled=True, port=0)  # default limits
    keys = {key(i): f"ws:load{i:03d}" for i in range(CLIENTS)}
    async with (
        open_runtime(settings, provider=ScriptedProvider()) as rt,
        WebSocketChannel(rt.kernel, ws_settings, keys=keys) as channel,
    ):
        async with asyncio.timeout(SAFETY):
            clients = await asyncio.gather(
                *(
                    connect(
                        channel.url,
                        additional_headers={"X-API-Key": key(i)},
                        local_addr=(peer(i), 0),
                    )
                    for i in range(CLIENTS)
                )
            )
            try:
                hellos = await asyncio.gather(*(ws.recv() for ws in clients))
                assert all(json.loads(h)["type"] == "hello" for h in hellos)
                results = await asyncio.gather(*(converse(ws, i) for i, ws in enumerate(clients)))
            finally:
                await asyncio.gather(*(ws.close() for ws in clients))

    for i, frames in enumerate(results):
        assert [f for f in frames if f["type"] == "error"] == [], f"client {i}"
        by_request: dict[str, list[dict[str, Any]]] = {}
        for frame in frames:
            by_request.setdefault(frame["reply_to"], []).append(frame)
        assert sorted(by_request) == sorted(f"{i}-{n}" for n in range(TURNS))
        sessions = set()
        for n in range(TURNS):
            answer = by_request[f"{i}-{n}"]
            kinds = [f["type"] for f in answer]
            assert kinds[0] == "session" and kinds[-2:] == ["done", "end"], kinds
            assert set(kinds[1:-2]) == {"token"}
            assert answer[-2]["text"] == f"You said: client {i} message {n}"
            assert "".join(f["text"] for f in answer if f["type"] == "token") == answer[-2]["text"]
            sessions.add(answer[0]["session_id"])
        assert len(sessions) == 1, f"client {i} spread over {sessions}"

    db = tmp_path / "data" / "conversations.db"
    users = Counter(
        str(r[0]) for r in query(db, "SELECT picobot_open(content) FROM messages WHERE role='user'")
    )
    expected = {f"client {i} message {n}" for i in range(CLIENTS) for n in range(TURNS)}
    assert set(users) == expected
    assert set(users.values()) == {1}
    # Each session holds its client's conversation, in order, question then answer.
    rows = query(
        db,
        "SELECT s.user_id, m.role, picobot_open(m.content) FROM messages m JOIN sessions s"
        " ON s.id = m.session_id ORDER BY s.user_id, m.seq_order",
    )
    per_user: dict[str, list[tuple[str, str]]] = {}
    for user_id, role, content in rows:
        per_user.setdefault(str(user_id), []).append((str(role), str(content)))
    assert len(per_user) == CLIENTS
    for i in range(CLIENTS):
        said = [f"client {i} message {n}" for n in range(TURNS)]
        expected_log = [
            pair for t in said for pair in (("user", t), ("assistant", f"You said: {t}"))
        ]
        assert per_user[f"ws:load{i:03d}"] == expected_log
