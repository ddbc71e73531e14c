"""The TUI attached to a remote PicoBot: RemoteBackend against the real WebSocket channel
(real server on 127.0.0.1:0, real kernel on SQLite, scripted model), driven by Textual's
pilot where the UI is involved.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from picobot.channels.tui.app import PicoBotApp
from picobot.channels.tui.backend import ChatBackend
from picobot.channels.tui.remote import (
    RemoteBackend,
    RemoteUnavailable,
    run_remote_app,
    run_remote_tui,
)
from picobot.channels.tui.widgets import ConfirmScreen, StatusLine
from picobot.channels.websocket.connection import CUT_OFF
from picobot.channels.websocket.server import WebSocketChannel
from picobot.cli.main import main
from picobot.config.channels import WebSocketSettings
from picobot.config.settings import DataSettings, Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Outbound, OutboundKind, error
from picobot.runtime import Runtime, open_runtime
from tests.channels.gated import GatedProvider

KEY_A = "alice-key-0123456789"
KEY_C = "carol-key-0123456789"
KEYS = {KEY_A: "ws:alice-ke", KEY_C: "ws:carol"}
SAFETY = 20.0


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


async def start(
    stack: AsyncExitStack, tmp_path: Path, provider: ScriptedProvider | None = None, **ws: Any
) -> tuple[Runtime, WebSocketChannel]:
    runtime = await stack.enter_async_context(
        open_runtime(
            Settings(data=DataSettings(dir=str(tmp_path))), provider=provider or ScriptedProvider()
        )
    )
    settings = WebSocketSettings(enabled=True, port=0, **ws)
    channel = await stack.enter_async_context(WebSocketChannel(runtime.kernel, settings, keys=KEYS))
    return runtime, channel


async def collect(events: AsyncIterator[Outbound]) -> list[Outbound]:
    async with asyncio.timeout(SAFETY):
        return [e async for e in events]


async def settle(pilot: Pilot[None]) -> None:
    """Wait until every queued job has run and the screen has caught up."""
    app = pilot.app
    assert isinstance(app, PicoBotApp)
    for _ in range(200):
        await app.workers.wait_for_complete()
        await pilot.pause()
        if not app.busy:
            return
    raise AssertionError("the app never went idle")


def shown(app: PicoBotApp) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in app.chat_log.messages()]


# --- the backend -----------------------------------------------------------------------


async def test_remote_backend_chats_streams_and_reads_history(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    runtime, channel = await start(stack, tmp_path)
    backend = await stack.enter_async_context(RemoteBackend(channel.url, KEY_C))
    assert isinstance(backend, ChatBackend)
    assert (backend.user_id, backend.model_name) == ("ws:carol", "scripted")
    assert await backend.history(10) == (None, [])
    events = await collect(backend.send("hello there"))
    kinds = [e.kind for e in events]
    assert kinds[0] is OutboundKind.SESSION
    assert kinds[-1] is OutboundKind.DONE
    assert kinds.count(OutboundKind.TOKEN) > 1
    session_id = events[0].session_id
    assert session_id is not None
    assert events[-1] == Outbound(OutboundKind.DONE, "You said: hello there", session_id=session_id)
    assert await backend.history(10) == (
        session_id,
        [("user", "hello there"), ("assistant", "You said: hello there")],
    )
    # Slash commands and confirmations come back as events, and the exchange ends.
    help_events = await collect(backend.send("/help"))
    assert [e.kind for e in help_events] == [OutboundKind.NOTICE]
    answered = await collect(backend.confirm("no-such-token", "y"))
    assert len(answered) == 1
    assert answered[0].kind in (OutboundKind.ERROR, OutboundKind.NOTICE)
    recent = await runtime.kernel.recent_history(Identity("ws", "ws:carol", "ws:carol"))
    assert recent.session_id == session_id


async def test_a_message_over_the_servers_limit_is_refused_locally(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    _, channel = await start(stack, tmp_path, max_message_bytes=256)
    backend = await stack.enter_async_context(RemoteBackend(channel.url, KEY_A))
    events = await collect(backend.send("x" * 1000))
    assert [(e.kind, e.code) for e in events] == [(OutboundKind.ERROR, "too_large")]
    assert "256" in events[0].text
    assert await backend.history(5) == (None, [])  # nothing was sent, the link still works


async def test_a_turn_cut_off_by_a_stop_is_reported_then_the_session_goes_on(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    provider = GatedProvider()
    runtime, channel = await start(stack, tmp_path, provider=provider)
    backend = await stack.enter_async_context(RemoteBackend(channel.url, KEY_A))
    provider.gate.set()
    first = await collect(backend.send("before"))
    session_id = first[0].session_id
    provider.gate.clear()
    provider.entered.clear()
    stream = backend.send("during")
    assert (await anext(stream)).kind is OutboundKind.SESSION
    async with asyncio.timeout(SAFETY):
        await provider.entered.wait()  # held in the model now
    await channel.stop(grace_secs=0)
    rest = await collect(stream)
    # The server answers the turn it cut off before it closes the connection.
    assert rest[-1] == error(CUT_OFF, "shutting_down")
    # A new server on the same port: the next message reconnects and the session goes on.
    provider.gate.set()
    settings = WebSocketSettings(enabled=True, port=channel.port)
    restarted = await stack.enter_async_context(
        WebSocketChannel(runtime.kernel, settings, keys=KEYS)
    )
    assert restarted.url == channel.url
    after = await collect(backend.send("after"))
    assert after[-1] == Outbound(OutboundKind.DONE, "You said: after", session_id=session_id)


async def test_connect_failures_are_one_clear_error(stack: AsyncExitStack, tmp_path: Path) -> None:
    _, channel = await start(stack, tmp_path)
    with pytest.raises(RemoteUnavailable) as refused:
        await RemoteBackend(channel.url, "wrong-key-0123456789").connect()
    assert refused.value.status == 401
    assert "refused the API key" in str(refused.value)
    with pytest.raises(RemoteUnavailable, match="not a valid WebSocket URL"):
        await RemoteBackend("http://example.invalid/ws", KEY_A).connect()


async def test_wss_to_a_plain_server_names_a_reason(
    stack: AsyncExitStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The server resets the TLS handshake: ConnectionResetError, which has no strerror.
    _, channel = await start(stack, tmp_path)
    url = channel.url.replace("ws://", "wss://")
    assert await run_remote_app(url, KEY_A, "PICOBOT_WS_KEY") == 1
    err = capsys.readouterr().err
    assert re.fullmatch(rf"picobot tui: cannot reach {re.escape(url)}: \S[^\n]*\n", err), err
    assert "TLS" in err


# --- the app over the network ---------------------------------------------------------------


async def test_the_tui_chats_with_a_remote_server(stack: AsyncExitStack, tmp_path: Path) -> None:
    _, channel = await start(stack, tmp_path)
    # Earlier conversation of this key, shown when the app starts.
    async with RemoteBackend(channel.url, KEY_C) as earlier:
        await collect(earlier.send("from before"))
    backend = await stack.enter_async_context(RemoteBackend(channel.url, KEY_C))
    app = PicoBotApp(backend)
    async with app.run_test() as pilot:
        await settle(pilot)
        log = shown(app)
        assert log[0][0] == "notice" and app.session_id is not None
        assert app.session_id in log[0][1]
        assert log[1:] == [("user", "from before"), ("assistant", "You said: from before")]
        line = app.query_one("#status", StatusLine).text
        assert "ws:carol" in line
        assert "scripted" in line
        assert f"session {app.session_id}" in line
        await pilot.press(*"over the wire")
        await pilot.press("enter")
        await settle(pilot)
        assert shown(app)[-2:] == [
            ("user", "over the wire"),
            ("assistant", "You said: over the wire"),
        ]
        assistant = app.chat_log.messages()[-1]
        assert not assistant.streaming


async def test_a_purge_is_confirmed_in_the_dialog_over_the_wire(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    runtime, channel = await start(stack, tmp_path)
    backend = await stack.enter_async_context(RemoteBackend(channel.url, KEY_A))
    app = PicoBotApp(backend)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press(*"forget me")
        await pilot.press("enter")
        await settle(pilot)
        session_id = app.session_id
        assert session_id is not None
        await pilot.press(*"/purge session")
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        role, text = shown(app)[-1]
        assert role == "notice"
        assert text.startswith("Deleted")
        line = app.query_one("#status", StatusLine).text
        assert session_id not in line and "session (new)" in line
    assert await runtime.kernel.sessions.get(session_id) is None


# --- run_remote_tui -----------------------------------------------------------------------


def test_a_missing_key_env_var_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_remote_tui("ws://127.0.0.1:1/ws", "PICOBOT_TEST_WS_KEY") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "PICOBOT_TEST_WS_KEY" in err


def test_an_unreachable_server_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("PICOBOT_TEST_WS_KEY", KEY_A)
    assert run_remote_tui(f"ws://127.0.0.1:{port}/ws", "PICOBOT_TEST_WS_KEY") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"picobot tui: cannot reach ws://127.0.0.1:{port}/ws")
    assert KEY_A not in err


@pytest.mark.parametrize(
    "url", ["ws://127.0.0.1:99999/ws", "ws://[::1", "ws://127.0.0.1:port/ws", "http://h/ws"]
)
def test_a_malformed_url_is_one_line_and_exit_1(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PICOBOT_WS_KEY", KEY_A)
    assert main(["tui", "--connect", url]) == 1
    assert capsys.readouterr().err == f"picobot tui: not a valid WebSocket URL: {url}\n"


async def test_a_refused_key_exits_1_naming_the_env_var(
    stack: AsyncExitStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, channel = await start(stack, tmp_path)
    assert await run_remote_app(channel.url, "wrong-key-0123456789", "MY_KEY_VAR") == 1
    err = capsys.readouterr().err
    assert err == f"picobot tui: {channel.url} refused the API key in MY_KEY_VAR\n"
