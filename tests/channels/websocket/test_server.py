"""The WebSocket channel against a real server on 127.0.0.1:0, the real websockets client
and a real kernel over a real SQLite file; only the model is scripted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, ConnectionClosedError, InvalidStatus

from picobot.channels.websocket.connection import CUT_OFF, RATE_BURST
from picobot.channels.websocket.server import WebSocketChannel
from picobot.config.channels import WebSocketSettings
from picobot.config.settings import DataSettings, Settings
from picobot.errors import ConfigError
from picobot.kernel.kernel import COMMAND_FAILED
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity
from picobot.runtime import Runtime, open_runtime
from tests.channels.gated import GatedProvider

KEY_A = "alice-key-0123456789"
KEY_B = "bobby-key-0123456789"
KEY_C = "carol-key-0123456789"
USER_A = "ws:alice-ke"
USER_B = "ws:bobby-ke"
ENV = "PICOBOT_WS_API_KEYS"
SAFETY = 20.0  # seconds; only a net against hangs, never what a test measures

Frame = dict[str, Any]


class Server:
    """A runtime and a started channel, closed by the test's exit stack."""

    def __init__(self, runtime: Runtime, channel: WebSocketChannel) -> None:
        self.runtime = runtime
        self.channel = channel

    async def client(
        self, key: str = KEY_A, *, header: str = "bearer", **kwargs: Any
    ) -> tuple[ClientConnection, Frame]:
        """Connect with ``key`` and read the hello frame."""
        headers = {"Authorization": f"Bearer {key}"} if header == "bearer" else {"X-API-Key": key}
        async with asyncio.timeout(SAFETY):
            ws = await connect(self.channel.url, additional_headers=headers, **kwargs)
        hello = await recv(ws)
        assert hello["type"] == "hello"
        return ws, hello

    async def stored(self, user_id: str) -> tuple[str | None, list[tuple[str, str]]]:
        """The current session and messages of a WebSocket user, read from the kernel."""
        recent = await self.runtime.kernel.recent_history(Identity("ws", user_id, user_id), 50)
        return recent.session_id, [(m.role, m.content) for m in recent.messages]


async def start(
    stack: AsyncExitStack,
    tmp_path: Path,
    provider: ScriptedProvider | None = None,
    **settings: Any,
) -> Server:
    """Open a runtime on tmp_path and start the channel on a free port."""
    runtime = await stack.enter_async_context(
        open_runtime(
            Settings(data=DataSettings(dir=str(tmp_path))), provider=provider or ScriptedProvider()
        )
    )
    ws_settings = WebSocketSettings(enabled=True, port=0, **settings)
    channel = await stack.enter_async_context(WebSocketChannel(runtime.kernel, ws_settings))
    return Server(runtime, channel)


async def recv(ws: ClientConnection) -> Frame:
    async with asyncio.timeout(SAFETY):
        frame = json.loads(await ws.recv())
    assert isinstance(frame, dict)
    return frame


async def until_end(ws: ClientConnection, reply_to: str | None = None) -> list[Frame]:
    """Frames up to the ``end`` answering ``reply_to`` (that end excluded)."""
    frames: list[Frame] = []
    while True:
        frame = await recv(ws)
        if frame["type"] == "end" and frame.get("reply_to") == reply_to:
            return frames
        frames.append(frame)


async def answers(ws: ClientConnection, ids: Sequence[str]) -> dict[str, list[Frame]]:
    """Frames grouped by ``reply_to`` until every id in ``ids`` has its ``end``."""
    grouped: dict[str, list[Frame]] = {i: [] for i in ids}
    open_ids = set(ids)
    while open_ids:
        frame = await recv(ws)
        reply_to = frame.get("reply_to")
        if frame["type"] == "pong":  # a pong has no end
            grouped.setdefault(str(reply_to), []).append(frame)
            continue
        assert reply_to in grouped, frame
        if frame["type"] == "end":
            open_ids.discard(reply_to)
        else:
            grouped[reply_to].append(frame)
    return grouped


async def chat(ws: ClientConnection, text: str, **extra: Any) -> list[Frame]:
    await ws.send(json.dumps({"type": "chat", "text": text, **extra}))
    return await until_end(ws, extra.get("id"))


def types(frames: list[Frame]) -> list[str]:
    return [f["type"] for f in frames]


# --- authentication ----------------------------------------------------------------------


@pytest.mark.parametrize("header", ["bearer", "x-api-key"])
async def test_a_key_in_either_header_authenticates(server: Server, header: str) -> None:
    ws, hello = await server.client(KEY_A, header=header)
    async with ws:
        assert hello == {
            "type": "hello",
            "protocol": 1,
            "user_id": USER_A,
            "model": "scripted",
            "max_message_bytes": 1024,
        }


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-key-0123456789"},
        {"Authorization": f"Basic {KEY_A}"},
        {"Authorization": f"Bearer {KEY_A[:8]}"},
        {"Authorization": f"Bearer {KEY_A}x"},
        {"X-API-Key": KEY_A.upper()},
    ],
)
async def test_a_missing_or_wrong_key_is_refused_before_the_upgrade(
    server: Server, headers: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with pytest.raises(InvalidStatus) as caught:
        await connect(server.channel.url, additional_headers=headers)
    assert caught.value.response.status_code == 401
    assert caught.value.response.headers["WWW-Authenticate"].startswith("Bearer")
    assert "opened for" not in caplog.text  # no connection handler ever ran
    assert KEY_A not in caplog.text


async def test_a_wrong_path_is_404(server: Server) -> None:
    url = server.channel.url.replace("/ws", "/other")
    with pytest.raises(InvalidStatus) as caught:
        await connect(url, additional_headers={"Authorization": f"Bearer {KEY_A}"})
    assert caught.value.response.status_code == 404


@pytest.mark.parametrize("path", ["//[/ws", "//host/ws", "/ws#x"])
async def test_a_path_that_only_parses_to_the_endpoint_is_404_without_a_traceback(
    server: Server, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    # Paths a URL parser reads as "//netloc/path" (or cannot read: "//[" is a broken
    # IPv6 host) are not the endpoint; no request line makes the server log an error.
    caplog.set_level(logging.INFO)
    request = (
        f"GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        f"Sec-WebSocket-Version: 13\r\nX-API-Key: {KEY_A}\r\n\r\n"
    )
    async with asyncio.timeout(SAFETY):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.channel.port)
        writer.write(request.encode())
        status = await reader.readline()
        writer.close()
        await writer.wait_closed()
    assert status.split()[1] == b"404"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_named_keys_map_to_their_identity(server: Server) -> None:
    ws, hello = await server.client(KEY_C)
    async with ws:
        assert hello["user_id"] == "ws:carol"
        frames = await chat(ws, "hi")
    session = await server.runtime.kernel.sessions.get(frames[0]["session_id"])
    assert session is not None and session.user_id == "ws:carol"


@pytest.mark.parametrize("raw", ["", " , ", "too-short", f"{KEY_A}:not valid"])
async def test_bad_or_missing_keys_fail_at_startup_naming_the_env_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(ENV, raw)
    async with open_runtime(
        Settings(data=DataSettings(dir=str(tmp_path))), provider=ScriptedProvider()
    ) as rt:
        with pytest.raises(ConfigError, match=ENV) as caught:
            WebSocketChannel(rt.kernel, WebSocketSettings(port=0))
    assert KEY_A not in str(caught.value)


# --- chatting ---------------------------------------------------------------------------


async def test_a_chat_streams_tokens_then_done_and_is_stored(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    ws, _ = await server.client()
    async with ws:
        frames = await chat(ws, "secret plans", id="m1")
    assert types(frames)[0] == "session"
    assert types(frames)[-1] == "done"
    tokens = [f for f in frames if f["type"] == "token"]
    assert len(tokens) > 1
    assert all(f["reply_to"] == "m1" for f in frames)
    done = frames[-1]
    assert "".join(t["text"] for t in tokens) == done["text"] == "You said: secret plans"
    session_id, stored = await server.stored(USER_A)
    assert done["session_id"] == session_id
    assert stored == [("user", "secret plans"), ("assistant", "You said: secret plans")]
    # The channel logs connections with the user id, never content or keys, even at
    # DEBUG (the websockets library would log headers and frames there).
    server_log = "\n".join(
        r.getMessage() for r in caplog.records if r.name.startswith("picobot.channels")
    )
    assert f"opened for {USER_A}" in server_log
    assert "secret plans" not in server_log
    assert KEY_A not in server_log


async def test_turns_of_one_connection_run_in_order(server: Server) -> None:
    ws, _ = await server.client()
    async with ws:
        for i in range(3):
            await ws.send(json.dumps({"type": "chat", "text": f"n{i}", "id": str(i)}))
        grouped = await answers(ws, ["0", "1", "2"])
    assert [grouped[i][-1]["text"] for i in "012"] == [
        "You said: n0",
        "You said: n1",
        "You said: n2",
    ]


async def test_another_users_session_id_is_refused_and_nothing_written(server: Server) -> None:
    alice, _ = await server.client(KEY_A)
    bob, _ = await server.client(KEY_B)
    async with alice, bob:
        alice_session = (await chat(alice, "mine"))[0]["session_id"]
        frames = await chat(bob, "sneaky", session_id=alice_session)
        assert types(frames) == ["error"]
        assert frames[0]["code"] == "denied"
        assert await server.stored(USER_A) == (
            alice_session,
            [("user", "mine"), ("assistant", "You said: mine")],
        )
        assert await server.stored(USER_B) == (None, [])
        # Bob's own chat still works and lands in a session of his own.
        own = await chat(bob, "hello")
        assert own[0]["session_id"] != alice_session


async def test_a_reconnecting_client_continues_its_session(server: Server) -> None:
    ws, _ = await server.client(KEY_A)
    async with ws:
        first = (await chat(ws, "one"))[0]["session_id"]
    ws, _ = await server.client(KEY_A, header="x-api-key")
    async with ws:
        second = (await chat(ws, "two"))[0]["session_id"]
        await ws.send(json.dumps({"type": "history", "limit": 10, "id": "h"}))
        history = await until_end(ws, "h")
    assert first == second
    assert history == [
        {
            "type": "history",
            "session_id": first,
            "messages": [
                {"role": "user", "content": "one"},
                {"role": "assistant", "content": "You said: one"},
                {"role": "user", "content": "two"},
                {"role": "assistant", "content": "You said: two"},
            ],
            "reply_to": "h",
        }
    ]


async def test_history_before_any_chat_is_empty(server: Server) -> None:
    ws, _ = await server.client(KEY_B)
    async with ws:
        await ws.send(json.dumps({"type": "history"}))
        assert await until_end(ws) == [{"type": "history", "session_id": None, "messages": []}]


# --- bad input, limits, keepalive ----------------------------------------------------------


async def test_a_history_read_that_fails_does_not_claim_a_message_was_saved(
    server: Server,
) -> None:
    ws, _ = await server.client()
    async with ws:
        await server.runtime.db.close()  # every read fails from now on
        await ws.send(json.dumps({"type": "history", "id": "h"}))
        frames = await until_end(ws, "h")
    assert frames == [
        {"type": "error", "code": "internal", "message": COMMAND_FAILED, "reply_to": "h"}
    ]


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("{this is not json", "bad_json"),
        ('["chat"]', "bad_message"),
        ('{"type":"shout","text":"hi"}', "unknown_type"),
        ('{"type":"chat"}', "bad_field"),
        ('{"type":"confirm","token":"t"}', "bad_field"),
        (json.dumps({"type": "chat", "text": "x" * 1500}), "too_large"),
    ],
)
async def test_bad_frames_get_an_error_and_the_connection_stays_usable(
    server: Server, frame: str, code: str
) -> None:
    ws, _ = await server.client()
    async with ws:
        await ws.send(frame)
        error = await recv(ws)
        assert error["type"] == "error"
        assert error["code"] == code
        assert "reply_to" not in error
        frames = await chat(ws, "still here")
        assert frames[-1]["text"] == "You said: still here"
    _, stored = await server.stored(USER_A)
    assert stored == [("user", "still here"), ("assistant", "You said: still here")]


async def test_frames_above_the_hard_cap_close_with_1009(server: Server) -> None:
    ws, _ = await server.client()
    async with ws:
        await ws.send(json.dumps({"type": "chat", "text": "x" * 3000}))
        with pytest.raises(ConnectionClosedError) as caught:
            await recv(ws)
        assert caught.value.sent is not None or caught.value.rcvd is not None
        assert ws.close_code == 1009
    ws, _ = await server.client()  # the server itself is fine
    async with ws:
        assert (await chat(ws, "ok"))[-1]["type"] == "done"


async def test_the_rate_limit_drops_messages_beyond_the_burst_of_the_key(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    server = await start(stack, tmp_path, rate_limit_per_minute=1)
    burst = [str(i) for i in range(RATE_BURST)]
    ws, _ = await server.client()
    async with ws:
        for i in burst:
            await ws.send(json.dumps({"type": "chat", "text": f"m{i}", "id": i}))
        await ws.send(json.dumps({"type": "chat", "text": "one too many", "id": "x"}))
        await ws.send(json.dumps({"type": "ping", "id": "p"}))  # pings are not limited
        grouped = await answers(ws, [*burst, "x"])
    assert grouped["p"] == [{"type": "pong", "reply_to": "p"}]
    assert all(grouped[i][-1]["type"] == "done" for i in burst)
    assert [(f["type"], f["code"]) for f in grouped["x"]] == [("error", "rate_limited")]
    # Reconnecting, or a second connection alongside, starts no new bucket for the key.
    again, _ = await server.client()
    alongside, _ = await server.client()
    bob, _ = await server.client(KEY_B)
    async with again, alongside, bob:
        assert [f["code"] for f in await chat(again, "more", id="a")] == ["rate_limited"]
        assert [f["code"] for f in await chat(alongside, "more", id="b")] == ["rate_limited"]
        assert types(await chat(bob, "hi", id="c"))[-1] == "done"  # other keys are not touched
    _, stored = await server.stored(USER_A)
    assert len(stored) == 2 * RATE_BURST
    assert ("user", "one too many") not in stored and ("user", "more") not in stored


async def test_ping_is_answered_while_a_turn_is_running(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    provider = GatedProvider()
    server = await start(stack, tmp_path, provider=provider)
    ws, _ = await server.client()
    async with ws:
        await ws.send(json.dumps({"type": "chat", "text": "slow one", "id": "c"}))
        assert (await recv(ws))["type"] == "session"
        async with asyncio.timeout(SAFETY):
            await provider.entered.wait()  # the turn is now held in the model
        await ws.send(json.dumps({"type": "ping", "id": "p"}))
        assert await recv(ws) == {"type": "pong", "reply_to": "p"}
        provider.gate.set()
        frames = await until_end(ws, "c")
    assert frames[-1]["text"] == "You said: slow one"


async def test_a_slow_consumer_is_disconnected_and_the_server_stays_healthy(
    stack: AsyncExitStack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="picobot.channels.websocket.server")
    # A reply larger than what the kernel's socket buffers absorb (a few MB); sent
    # uncompressed, since permessage-deflate would shrink this one to nothing.
    big = "y" * 6_000_000
    provider = ScriptedProvider([big], chunk_size=16_384)
    server = await start(stack, tmp_path, provider=provider, send_queue_size=4)
    replied = asyncio.Event()
    server.runtime.kernel.turn_listeners.append(lambda _ctx: replied.set())
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.channel.port))
    slow, _ = await server.client(KEY_A, sock=sock, max_size=None, compression=None)
    async with slow:
        slow.transport.pause_reading()  # a client that never reads
        await slow.send(json.dumps({"type": "chat", "text": "tell me everything"}))
        # The turn goes on without its reader; wait until its reply is stored.
        async with asyncio.timeout(SAFETY):
            await replied.wait()
        assert "send queue full" in caplog.text
        slow.transport.resume_reading()
        with pytest.raises(ConnectionClosed):
            while True:
                await recv(slow)
        # 1008 if it reads the close frame in time, else the server dropped the link.
        assert slow.close_code in (1008, 1006)
    _, stored = await server.stored(USER_A)
    assert stored == [("user", "tell me everything"), ("assistant", big)]
    bob, _ = await server.client(KEY_B)
    async with bob:
        assert (await chat(bob, "healthy?"))[-1]["text"] == "You said: healthy?"


async def test_a_fast_stream_to_a_reading_client_never_overflows_a_small_queue(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    # 300 deltas produced without a single await, into a queue of 4 frames: the relay
    # must hand the sender a turn before the queue fills, or the reader is dropped.
    reply = "".join(f"w{i:03d} " for i in range(300)).strip()
    provider = ScriptedProvider([reply], chunk_size=5)
    server = await start(stack, tmp_path, provider=provider, send_queue_size=4)
    ws, _ = await server.client(KEY_A)
    async with ws:
        frames = await chat(ws, "go")
    tokens = [f["text"] for f in frames if f["type"] == "token"]
    assert len(tokens) >= 300 and "".join(tokens) == reply
    assert frames[-1]["type"] == "done" and frames[-1]["text"] == reply


# --- shutdown ------------------------------------------------------------------------------


async def test_stop_lets_the_turn_in_flight_finish_then_closes_with_1001(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    provider = GatedProvider()
    server = await start(stack, tmp_path, provider=provider)
    ws, _ = await server.client()
    async with ws:
        await ws.send(json.dumps({"type": "chat", "text": "finish me", "id": "c"}))
        assert (await recv(ws))["type"] == "session"
        async with asyncio.timeout(SAFETY):
            await provider.entered.wait()
        stopping = asyncio.create_task(server.channel.stop(grace_secs=SAFETY))
        await asyncio.sleep(0)  # stop() runs up to its wait for the turn in flight
        assert server.channel.stopping
        await ws.send(json.dumps({"type": "chat", "text": "too late", "id": "late"}))
        assert await until_end(ws, "late") == [
            {
                "type": "error",
                "code": "shutting_down",
                "message": "The server is shutting down; this message was not processed.",
                "reply_to": "late",
            }
        ]
        provider.gate.set()
        frames = await until_end(ws, "c")
        assert frames[-1] == {
            "type": "done",
            "text": "You said: finish me",
            "session_id": frames[-1]["session_id"],
            "reply_to": "c",
        }
        with pytest.raises(ConnectionClosed):
            await recv(ws)
        assert ws.close_code == 1001
        await stopping
    _, stored = await server.stored(USER_A)
    assert stored == [("user", "finish me"), ("assistant", "You said: finish me")]
    with pytest.raises(OSError):
        await connect(server.channel.url, additional_headers={"X-API-Key": KEY_A})


async def test_turns_outliving_the_grace_period_are_cancelled_and_answered(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    provider = GatedProvider()  # never released
    server = await start(stack, tmp_path, provider=provider)
    first, _ = await server.client()
    second, _ = await server.client()  # the same key: the same current session
    async with first, second:
        await first.send(json.dumps({"type": "chat", "text": "stuck", "id": "1"}))
        assert (await recv(first))["type"] == "session"
        async with asyncio.timeout(SAFETY):
            await provider.entered.wait()
        # This turn waits for the session, behind the first: nothing of it is stored yet.
        await second.send(json.dumps({"type": "chat", "text": "waiting", "id": "2"}))
        await second.send(json.dumps({"type": "ping", "id": "p"}))
        assert await recv(second) == {"type": "pong", "reply_to": "p"}
        async with asyncio.timeout(SAFETY):
            await server.channel.stop(grace_secs=0)
        # Each request still gets its answer and its end before the 1001.
        cut_off = {"type": "error", "code": "shutting_down", "message": CUT_OFF}
        assert await until_end(first, "1") == [{**cut_off, "reply_to": "1"}]
        assert await until_end(second, "2") == [{**cut_off, "reply_to": "2"}]
        for ws in (first, second):
            with pytest.raises(ConnectionClosed):
                await recv(ws)
            assert ws.close_code == 1001
    _, stored = await server.stored(USER_A)
    assert stored == [("user", "stuck")]  # the first message was kept; the second never ran


# --- confirmation ------------------------------------------------------------------------


async def test_confirm_without_anything_pending_is_a_harmless_no(server: Server) -> None:
    ws, _ = await server.client()
    async with ws:
        await ws.send(json.dumps({"type": "confirm", "token": "bogus", "answer": "y", "id": "k"}))
        frames = await until_end(ws, "k")
    assert len(frames) == 1
    assert frames[0]["type"] in ("error", "notice")
    assert "Deleted" not in json.dumps(frames)


async def test_purge_over_websocket_asks_then_deletes(server: Server) -> None:
    alice, _ = await server.client(KEY_A)
    bob, _ = await server.client(KEY_B)
    async with alice, bob:
        session_id = (await chat(alice, "forget this"))[0]["session_id"]
        asked = await chat(alice, "/purge session", id="p")
        assert types(asked) == ["confirm_request"]
        token = asked[0]["token"]
        assert "2" in asked[0]["prompt"]  # states what will be deleted
        # Another user cannot answer it, even with the token.
        await bob.send(json.dumps({"type": "confirm", "token": token, "answer": "y", "id": "b"}))
        assert "Deleted" not in json.dumps(await until_end(bob, "b"))
        assert len((await server.stored(USER_A))[1]) == 2
        await alice.send(json.dumps({"type": "confirm", "token": token, "answer": "y", "id": "y"}))
        done = await until_end(alice, "y")
    assert types(done) == ["notice"]
    assert done[0]["text"].startswith("Deleted")
    assert await server.runtime.kernel.sessions.get(session_id) is None
