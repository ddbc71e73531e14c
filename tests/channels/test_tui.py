"""The Textual chat UI, driven by Textual's pilot.

The first half runs the app against a small in-test backend that yields real Outbound
events (and can hold a turn mid-stream); the second half drives the real kernel over a
real SQLite file with the scripted model.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from picobot.channels import tui
from picobot.channels.tui import run_tui
from picobot.channels.tui.app import GENERIC_FAILURE, PicoBotApp
from picobot.channels.tui.backend import ChatBackend, LocalBackend, tui_identity
from picobot.channels.tui.widgets import ConfirmScreen, StatusLine
from picobot.config.settings import DataSettings, LLMSettings, LoggingSettings, Settings
from picobot.llm.scripted import ScriptedProvider, ScriptedTurn
from picobot.messages import Identity, Outbound, OutboundKind, error, notice
from picobot.runtime import open_runtime

Script = Callable[[str], Iterable[Outbound]]


def echo_turn(text: str, session_id: str = "s1") -> list[Outbound]:
    """What the kernel yields for a normal turn, streamed in 4-character tokens."""
    reply = f"You said: {text}"
    tokens = [reply[i : i + 4] for i in range(0, len(reply), 4)]
    return [
        Outbound(OutboundKind.SESSION, session_id=session_id),
        *(Outbound(OutboundKind.TOKEN, t, session_id=session_id) for t in tokens),
        Outbound(OutboundKind.DONE, reply, session_id=session_id),
    ]


class FakeBackend:
    """A ChatBackend with scripted events; ``gate`` holds a stream after its first event."""

    def __init__(
        self,
        script: Script = echo_turn,
        *,
        history: tuple[str | None, list[tuple[str, str]]] = (None, []),
        confirm_events: Iterable[Outbound] = (),
    ) -> None:
        self.script = script
        self.stored = history
        self.confirm_events = list(confirm_events)
        self.sent: list[str] = []
        self.confirmed: list[tuple[str, str]] = []
        self.gate: asyncio.Event | None = None

    @property
    def user_id(self) -> str:
        return "tui:tester"

    @property
    def model_name(self) -> str:
        return "fake-model"

    async def send(self, text: str) -> AsyncIterator[Outbound]:
        self.sent.append(text)
        for i, event in enumerate(self.script(text)):
            if i == 1 and self.gate is not None:
                await self.gate.wait()
            yield event

    async def history(self, limit: int) -> tuple[str | None, list[tuple[str, str]]]:
        return self.stored

    async def confirm(self, token: str, answer: str) -> AsyncIterator[Outbound]:
        self.confirmed.append((token, answer))
        for event in self.confirm_events:
            yield event


async def settle(pilot: Pilot[None]) -> None:
    """Wait until every queued job has run and the screen has caught up."""
    app = pilot.app
    assert isinstance(app, PicoBotApp)
    for _ in range(100):
        await app.workers.wait_for_complete()
        await pilot.pause()
        if not app.busy:
            return
    raise AssertionError("the app never went idle")


async def say(pilot: Pilot[None], text: str) -> None:
    """Type ``text`` into the input and press Enter."""
    await pilot.press(*text)
    await pilot.press("enter")


def shown(app: PicoBotApp) -> list[tuple[str, str]]:
    """The chat log as (role, text) pairs."""
    return [(m.role, m.text) for m in app.chat_log.messages()]


def status(app: PicoBotApp) -> str:
    return app.query_one("#status", StatusLine).text


# --- the UI against an in-test backend -------------------------------------------------


def test_fake_backend_satisfies_the_protocol() -> None:
    assert isinstance(FakeBackend(), ChatBackend)


async def test_history_and_status_are_shown_on_mount() -> None:
    history = [("user", "hi"), ("tool", "tool output"), ("assistant", "hello!")]
    app = PicoBotApp(FakeBackend(history=("s-old", history)))
    async with app.run_test() as pilot:
        await settle(pilot)
        log = shown(app)
        assert log[1:] == [("user", "hi"), ("assistant", "hello!")]
        assert log[0][0] == "notice" and "s-old" in log[0][1]
        line = status(app)
        assert "session s-old" in line
        assert "tui:tester" in line
        assert "fake-model" in line


async def test_a_reply_streams_into_one_message_and_is_finalized() -> None:
    backend = FakeBackend()
    backend.gate = asyncio.Event()
    app = PicoBotApp(backend)
    async with app.run_test() as pilot:
        await settle(pilot)
        await say(pilot, "hello there")
        await pilot.pause()
        # Held after the SESSION event: the user's line is up, the status knows the session.
        assert ("user", "hello there") in shown(app)
        assert "session s1" in status(app)
        assert app.busy
        backend.gate.set()
        await settle(pilot)
        assistants = [m for m in app.chat_log.messages() if m.role == "assistant"]
        assert len(assistants) == 1
        assert assistants[0].text == "You said: hello there"
        assert not assistants[0].streaming
        assert backend.sent == ["hello there"]
        assert app.query_one("#prompt", Input).value == ""


async def test_tokens_render_before_done() -> None:
    release = asyncio.Event()

    async def slow_send(text: str) -> AsyncIterator[Outbound]:
        yield Outbound(OutboundKind.TOKEN, "Hel")
        yield Outbound(OutboundKind.TOKEN, "lo")
        await release.wait()
        yield Outbound(OutboundKind.DONE, "Hello")

    backend = FakeBackend()
    backend.send = slow_send  # type: ignore[method-assign]
    app = PicoBotApp(backend)
    async with app.run_test() as pilot:
        await settle(pilot)
        await say(pilot, "x")
        await pilot.pause()
        partial = app.chat_log.messages()[-1]
        assert (partial.role, partial.text, partial.streaming) == ("assistant", "Hello", True)
        release.set()
        await settle(pilot)
        assert not partial.streaming
        assert shown(app)[-1] == ("assistant", "Hello")


async def test_blank_input_is_ignored() -> None:
    backend = FakeBackend()
    app = PicoBotApp(backend)
    async with app.run_test() as pilot:
        await settle(pilot)
        before = shown(app)
        await say(pilot, "   ")
        await settle(pilot)
        assert backend.sent == []
        assert shown(app) == before


async def test_messages_typed_during_a_turn_are_queued_in_order() -> None:
    backend = FakeBackend()
    backend.gate = asyncio.Event()
    app = PicoBotApp(backend)
    async with app.run_test() as pilot:
        await settle(pilot)
        await say(pilot, "one")
        await say(pilot, "two")
        await pilot.pause()
        assert backend.sent == ["one"]
        assert "1 queued" in status(app)
        # The queued message is shown at once, marked, below the turn under way.
        assert shown(app)[-2:] == [("user", "one"), ("user", "two")]
        waiting = app.chat_log.messages()[-1]
        assert waiting.pending and "[queued]" in str(waiting.visual)
        backend.gate.set()
        await settle(pilot)
        assert backend.sent == ["one", "two"]
        # Each reply lands under its own message, and nothing is marked queued any more.
        assert shown(app)[-4:] == [
            ("user", "one"),
            ("assistant", "You said: one"),
            ("user", "two"),
            ("assistant", "You said: two"),
        ]
        assert not waiting.pending and "[queued]" not in str(waiting.visual)
        assert "queued" not in status(app)


async def test_notices_and_errors_are_rendered_distinctly() -> None:
    def script(text: str) -> list[Outbound]:
        if text == "/help":
            return [notice("Commands:\n/new  start a new session", "s1")]
        return [Outbound(OutboundKind.SESSION, session_id="s1"), error("The model is down.")]

    app = PicoBotApp(FakeBackend(script))
    async with app.run_test() as pilot:
        await settle(pilot)
        await say(pilot, "/help")
        await say(pilot, "hi")
        await settle(pilot)
        messages = app.chat_log.messages()
        help_line = next(m for m in messages if m.role == "notice" and "Commands" in m.text)
        failure = messages[-1]
        assert (failure.role, failure.text) == ("error", "The model is down.")
        assert failure.has_class("error") and help_line.has_class("notice")
        # The error is drawn in the theme's error colour, the notice is not.
        error_color = app.theme_variables["text-error"]
        assert failure.styles.color.hex.lower() == error_color.lower()
        assert help_line.styles.color.hex.lower() != error_color.lower()


async def test_an_error_mid_stream_keeps_the_partial_reply_marked() -> None:
    def script(text: str) -> list[Outbound]:
        return [Outbound(OutboundKind.TOKEN, "Half an ans"), error("Lost the model.")]

    app = PicoBotApp(FakeBackend(script))
    async with app.run_test() as pilot:
        await settle(pilot)
        await say(pilot, "q")
        await settle(pilot)
        partial, failure = app.chat_log.messages()[-2:]
        assert partial.interrupted and not partial.streaming
        assert "[interrupted]" in str(partial.visual)
        assert (failure.role, failure.text) == ("error", "Lost the model.")


async def test_text_is_shown_literally_not_as_markup() -> None:
    app = PicoBotApp(FakeBackend())
    async with app.run_test() as pilot:
        await settle(pilot)
        await say(pilot, "[bold]x[/bold]")
        await settle(pilot)
        user = next(m for m in app.chat_log.messages() if m.role == "user")
        assert "[bold]x[/bold]" in str(user.visual)


async def test_a_failing_backend_shows_a_generic_error_and_the_app_goes_on() -> None:
    calls = 0

    def script(text: str) -> list[Outbound]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("secret internal detail")
        return echo_turn(text)

    app = PicoBotApp(FakeBackend(script))
    async with app.run_test() as pilot:
        await settle(pilot)
        await say(pilot, "first")
        await settle(pilot)
        assert shown(app)[-1] == ("error", GENERIC_FAILURE)
        assert all("secret" not in text for _, text in shown(app))
        await say(pilot, "second")
        await settle(pilot)
        assert shown(app)[-1] == ("assistant", "You said: second")


async def test_switching_session_shows_its_history() -> None:
    backend = FakeBackend(history=("s1", [("user", "old question")]))

    def script(text: str) -> list[Outbound]:
        if text == "/resume s2":
            backend.stored = ("s2", [("user", "resumed q"), ("assistant", "resumed a")])
            return [
                Outbound(OutboundKind.SESSION, session_id="s2"),
                notice("Resumed session s2 (2 messages).", "s2"),
            ]
        return echo_turn(text)

    backend.script = script
    app = PicoBotApp(backend)
    async with app.run_test() as pilot:
        await settle(pilot)
        await say(pilot, "/resume s2")
        await settle(pilot)
        assert shown(app)[-2:] == [("user", "resumed q"), ("assistant", "resumed a")]
        assert "session s2" in status(app)


@pytest.mark.parametrize(("keys", "answer"), [(("y",), "y"), (("escape",), "n"), (("n",), "n")])
async def test_confirm_request_opens_a_dialog_and_sends_the_answer(
    keys: tuple[str, ...], answer: str
) -> None:
    def script(text: str) -> list[Outbound]:
        return [
            Outbound(
                OutboundKind.CONFIRM_REQUEST, "Delete 3 messages of session s1?", token="tok-1"
            )
        ]

    backend = FakeBackend(script, confirm_events=[notice("Done: 3 messages deleted.")])
    app = PicoBotApp(backend)
    async with app.run_test() as pilot:
        await settle(pilot)
        await say(pilot, "/purge session")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ConfirmScreen)
        assert "Delete 3 messages" in str(screen.query_one("#question").render())
        assert "waiting for your answer" in status(app)
        assert backend.confirmed == []
        await pilot.press(*keys)
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)
        assert backend.confirmed == [("tok-1", answer)]
        assert shown(app)[-1] == ("notice", "Done: 3 messages deleted.")


async def test_enter_in_the_dialog_declines() -> None:
    def script(text: str) -> list[Outbound]:
        return [Outbound(OutboundKind.CONFIRM_REQUEST, "Purge everything?", token="t")]

    backend = FakeBackend(script)
    app = PicoBotApp(backend)
    async with app.run_test() as pilot:
        await settle(pilot)
        await say(pilot, "/purge user")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("enter")
        await settle(pilot)
        assert backend.confirmed == [("t", "n")]


async def test_queued_messages_wait_until_the_confirmation_is_answered() -> None:
    def script(text: str) -> list[Outbound]:
        if text == "/purge session":
            return [Outbound(OutboundKind.CONFIRM_REQUEST, "Sure?", token="t")]
        return echo_turn(text)

    backend = FakeBackend(script)
    backend.gate = asyncio.Event()
    app = PicoBotApp(backend)
    async with app.run_test() as pilot:
        await settle(pilot)
        await say(pilot, "first")  # held mid-stream by the gate
        await say(pilot, "/purge session")
        await say(pilot, "after")
        backend.gate.set()
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        # The answer must reach the kernel before the queued message does.
        assert backend.sent == ["first", "/purge session"]
        await pilot.press("y")
        await settle(pilot)
        assert backend.confirmed == [("t", "y")]
        assert backend.sent == ["first", "/purge session", "after"]


@pytest.mark.parametrize("key", ["ctrl+c", "ctrl+q"])
async def test_ctrl_c_and_ctrl_q_quit(key: str) -> None:
    app = PicoBotApp(FakeBackend())
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press(key)
        await pilot.pause()
        assert not app.is_running


# --- the UI against the real kernel -----------------------------------------------------


def make_settings(tmp_path: Path) -> Settings:
    return Settings(data=DataSettings(dir=str(tmp_path)))


async def test_real_kernel_turn_streams_and_shows_session(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    provider = ScriptedProvider(["Hello from the scripted model."])
    async with open_runtime(settings, provider=provider) as rt:
        backend = LocalBackend(rt.kernel, tui_identity(settings), rt.provider.model_name)
        assert isinstance(backend, ChatBackend)
        app = PicoBotApp(backend)
        async with app.run_test() as pilot:
            await settle(pilot)
            await say(pilot, "hi bot")
            await settle(pilot)
            assert shown(app)[-2:] == [
                ("user", "hi bot"),
                ("assistant", "Hello from the scripted model."),
            ]
            session_id, stored = await backend.history(10)
            assert session_id is not None
            assert stored == [("user", "hi bot"), ("assistant", "Hello from the scripted model.")]
            assert app.session_id == session_id
            line = status(app)
            assert f"session {session_id}" in line
            assert "tui:local" in line
            assert "scripted" in line


async def test_real_kernel_error_is_visible_and_the_message_kept(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    provider = ScriptedProvider([ScriptedTurn(fail=True)])
    async with open_runtime(settings, provider=provider) as rt:
        backend = LocalBackend(rt.kernel, tui_identity(settings), rt.provider.model_name)
        app = PicoBotApp(backend)
        async with app.run_test() as pilot:
            await settle(pilot)
            await say(pilot, "will this fail")
            await settle(pilot)
            role, text = shown(app)[-1]
            assert role == "error"
            assert "could not get an answer" in text
            assert "scripted failure" not in text
            _, stored = await backend.history(10)
            assert stored == [("user", "will this fail")]


async def test_real_kernel_commands_switch_the_session(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    async with open_runtime(settings, provider=ScriptedProvider()) as rt:
        app = PicoBotApp(LocalBackend(rt.kernel, tui_identity(settings), "scripted"))
        async with app.run_test() as pilot:
            await settle(pilot)
            await say(pilot, "first")
            await settle(pilot)
            first = app.session_id
            await say(pilot, "/new")
            await settle(pilot)
            assert app.session_id not in (None, first)
            assert any(r == "notice" and "Started a new session" in t for r, t in shown(app))
            assert f"session {app.session_id}" in status(app)


async def test_real_kernel_edit_answers_in_a_new_branch(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    async with open_runtime(settings, provider=ScriptedProvider()) as rt:
        backend = LocalBackend(rt.kernel, tui_identity(settings), "scripted")
        app = PicoBotApp(backend)
        async with app.run_test() as pilot:
            await settle(pilot)
            await say(pilot, "teh typo")
            await settle(pilot)
            old = app.session_id
            await say(pilot, "/edit the typo")
            await settle(pilot)
            assert app.session_id not in (None, old)
            assert f"session {app.session_id}" in status(app)
            log = shown(app)
            assert log[-2][0] == "notice" and f"/resume {old}" in log[-2][1]
            assert log[-1] == ("assistant", "You said: the typo")
            _, stored = await backend.history(10)
            assert stored == [("user", "the typo"), ("assistant", "You said: the typo")]


async def test_history_is_shown_after_a_restart(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    async with open_runtime(settings, provider=ScriptedProvider()) as rt:
        app = PicoBotApp(LocalBackend(rt.kernel, tui_identity(settings), "scripted"))
        async with app.run_test() as pilot:
            await settle(pilot)
            await say(pilot, "remember this")
            await settle(pilot)
            first_session = app.session_id
    async with open_runtime(settings, provider=ScriptedProvider()) as rt:
        app = PicoBotApp(LocalBackend(rt.kernel, tui_identity(settings), "scripted"))
        async with app.run_test() as pilot:
            await settle(pilot)
            assert shown(app)[-2:] == [
                ("user", "remember this"),
                ("assistant", "You said: remember this"),
            ]
            assert app.session_id == first_session
            assert f"session {first_session}" in status(app)


# --- run_tui ------------------------------------------------------------------------------


def test_run_tui_runs_the_app_on_the_runtime_and_logs_to_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[ChatBackend] = []

    async def fake_run_async(self: PicoBotApp) -> None:
        seen.append(self.backend)
        logging.getLogger("picobot.test").warning("inside the app")

    monkeypatch.setattr(tui.PicoBotApp, "run_async", fake_run_async)
    root = logging.getLogger()
    handlers_before = list(root.handlers)
    settings = Settings(
        data=DataSettings(dir=str(tmp_path / "d")), llm=LLMSettings(provider="scripted")
    )
    assert run_tui(settings) == 0
    assert [(b.user_id, b.model_name) for b in seen] == [("tui:local", "scripted")]
    assert "inside the app" in (tmp_path / "d" / "picobot.log").read_text(encoding="utf-8")
    assert root.handlers == handlers_before


def test_run_tui_reports_a_broken_database_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "conversations.db").write_bytes(b"this is not a sqlite database" * 100)
    settings = Settings(
        data=DataSettings(dir=str(tmp_path)),
        llm=LLMSettings(provider="scripted"),
        logging=LoggingSettings(file=str(tmp_path / "logs" / "tui.log")),
    )
    assert run_tui(settings) == 1
    err = capsys.readouterr().err
    assert err.startswith("picobot tui: ")
    assert len(err.strip().splitlines()) == 1
    assert (tmp_path / "logs" / "tui.log").exists()


class ReadingModel:
    """What LocalProvider tells about a generation: reading its prompt, busy."""

    reading: int | None = None
    busy = False


async def test_a_long_wait_says_what_it_is() -> None:
    # Before, a 27 s wait before the first token showed nothing but "working…".
    backend = FakeBackend()
    backend.gate = asyncio.Event()
    chat, background = ReadingModel(), ReadingModel()
    local = LocalBackend(
        None,  # type: ignore[arg-type]
        Identity("tui", "tui:t", "t"),
        chat_model=chat,
        background_model=background,
    )
    backend.activity = local.activity  # type: ignore[attr-defined]
    app = PicoBotApp(backend)
    async with app.run_test() as pilot:
        await settle(pilot)
        await say(pilot, "one")
        await pilot.pause()
        assert status(app).startswith("working… · ")
        chat.reading, background.busy = 3412, True
        app._refresh_working()  # what the status line's half-second timer does
        await pilot.pause()
        assert (
            "working… (reading 3,412 tokens of context; learning and summarizing in the"
            " background)" in status(app)
        )
        chat.reading, background.busy = None, False
        backend.gate.set()
        await settle(pilot)
        assert "reading" not in status(app)
