"""Following events over the WebSocket channel: a client sees its own current session's
events and nobody else's (real server, real client, real SQLite file)."""

from __future__ import annotations

import asyncio
import gc
import json
from contextlib import AsyncExitStack
from pathlib import Path

from jsonschema import Draft202012Validator
from websockets.asyncio.client import ClientConnection

from picobot.channels.websocket.connection import RATE_BURST
from picobot.channels.websocket.frames import protocol_schema
from tests.channels.websocket.test_server import (
    KEY_A,
    KEY_B,
    Frame,
    Server,
    chat,
    recv,
    start,
    types,
)

SERVER_FRAMES = Draft202012Validator({**protocol_schema(), "$ref": "#/$defs/server"})


async def subscribe(ws: ClientConnection, events: bool = True) -> None:
    await ws.send(json.dumps({"type": "subscribe", "events": events, "id": "sub"}))
    answer = await recv(ws)
    assert answer == {"type": "subscribed", "events": events, "reply_to": "sub"}


async def events_of(ws: ClientConnection, seen: list[Frame], count: int) -> list[Frame]:
    """``count`` event frames: those among ``seen`` first, then read from ``ws``."""
    found = [f for f in seen if f["type"] == "event"]
    while len(found) < count:
        frame = await recv(ws)
        assert frame["type"] == "event", frame
        found.append(frame)
    for frame in found:
        SERVER_FRAMES.validate(frame)
    return found


async def test_a_subscriber_follows_its_own_session_only(server: Server) -> None:
    alice, _ = await server.client(KEY_A)
    bob, _ = await server.client(KEY_B)
    async with alice, bob:
        await subscribe(alice)
        await subscribe(bob)
        frames = await chat(alice, "hello there")
        session = frames[0]["session_id"]
        got = await events_of(alice, frames, 3)
        assert [(f["event"], f["payload"].get("role")) for f in got] == [
            ("session.started", None),
            ("message.appended", "user"),
            ("message.appended", "assistant"),
        ]
        assert {f["session_id"] for f in got} == {session}
        assert [f["event_id"] for f in got] == sorted(f["event_id"] for f in got)
        assert "hello" not in json.dumps(got)  # ids and roles, never the text

        # Bob asking for Alice's session is refused, and he sees only his own events.
        refused = await chat(bob, "sneaky", session_id=session)
        assert next(f for f in refused if f["type"] != "event")["code"] == "denied"
        own = await chat(bob, "mine")
        bobs = await events_of(bob, refused + own, 3)
        assert {f["session_id"] for f in bobs} == {own[0]["session_id"]} != {session}

        # Alice's next turn reaches Alice; then /new moves her feed to the new session.
        more = await chat(alice, "/new")
        new_session = next(f for f in more if f["type"] == "session")["session_id"]
        [started] = await events_of(alice, more, 1)
        assert (started["event"], started["session_id"]) == ("session.started", new_session)


async def test_unsubscribing_stops_the_events(server: Server) -> None:
    ws, _ = await server.client(KEY_A)
    async with ws:
        await subscribe(ws)
        first = await chat(ws, "one")
        await events_of(ws, first, 3)
        await subscribe(ws, events=False)
        second = await chat(ws, "two")
        assert "event" not in types(second)
        # Nothing was left to arrive: the next frame answers the ping.
        await ws.send(json.dumps({"type": "ping", "id": "p"}))
        assert await recv(ws) == {"type": "pong", "reply_to": "p"}


async def test_without_subscribing_no_event_is_sent(server: Server) -> None:
    ws, _ = await server.client(KEY_A)
    async with ws:
        frames = await chat(ws, "quiet")
        assert "event" not in types(frames)
        await ws.send(json.dumps({"type": "ping", "id": "p"}))
        assert await recv(ws) == {"type": "pong", "reply_to": "p"}


async def pong(ws: ClientConnection) -> None:
    """A ping answered: every frame sent before it has been handled."""
    await ws.send(json.dumps({"type": "ping", "id": "p"}))
    assert await recv(ws) == {"type": "pong", "reply_to": "p"}


def followers() -> list[asyncio.Task[None]]:
    """Every event-follower task still held anywhere (finished ones included)."""
    gc.collect()
    return [
        t
        for t in gc.get_objects()
        if isinstance(t, asyncio.Task) and t.get_name().endswith("-events")
    ]


async def test_subscribing_again_changes_nothing(server: Server) -> None:
    ws, _ = await server.client(KEY_A)
    async with ws:
        await subscribe(ws)
        await subscribe(ws)  # already subscribed: one follower, each event once
        assert len(followers()) == 1
        frames = await chat(ws, "once")
        await events_of(ws, frames, 3)
        await pong(ws)  # the next frame: no event came twice


async def test_toggling_subscribe_is_rate_limited_and_keeps_no_ended_followers(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    server = await start(stack, tmp_path, rate_limit_per_minute=1)
    ws, _ = await server.client(KEY_A)
    async with ws:
        for n in range(RATE_BURST + 2):
            frame = {"type": "subscribe", "events": n % 2 == 0, "id": str(n)}
            await ws.send(json.dumps(frame))
        got = [await recv(ws) for _ in range(RATE_BURST)]
        assert [(f["type"], f.get("events")) for f in got] == [
            ("subscribed", n % 2 == 0) for n in range(RATE_BURST)
        ]
        # Beyond the key's burst a subscribe is refused like a chat (no `end`: none
        # answers a subscribe) and changes nothing.
        refused = [await recv(ws) for _ in range(2)]
        assert [(f["type"], f["code"], f["reply_to"]) for f in refused] == [
            ("error", "rate_limited", str(n)) for n in (RATE_BURST, RATE_BURST + 1)
        ]
        await pong(ws)
        # The last accepted toggle unsubscribed; no ended follower is kept.
        assert followers() == []
        frames = await chat(ws, "over the limit")
        assert types(frames) == ["error"]  # the subscribes used up the key's burst
        await pong(ws)
