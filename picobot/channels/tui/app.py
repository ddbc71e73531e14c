"""The Textual chat app: renders kernel events, sends what the user types.

Every backend call runs in a worker, one job at a time, so the UI stays responsive and
events land in the order asked. Messages typed while a reply streams are queued; an
answer to a confirmation jumps the queue, because the kernel reads the next message of
this user as that answer.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.widgets import Input

from picobot.channels.tui.backend import ChatBackend
from picobot.channels.tui.widgets import ChatLog, ChatMessage, ConfirmScreen, Role, StatusLine
from picobot.errors import UserError
from picobot.messages import Outbound, OutboundKind

log = logging.getLogger(__name__)

HISTORY_LIMIT = 50
GENERIC_FAILURE = "Something went wrong talking to PicoBot; details are in the log file."

Job = Callable[[], Awaitable[None]]


class PicoBotApp(App[None]):
    """Chat log, status line and input, attached to a :class:`ChatBackend`."""

    TITLE = "PicoBot"
    CSS_PATH = Path(__file__).with_name("app.tcss")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+q", "quit", "Quit", priority=True, show=False),
        Binding("ctrl+c", "quit", "Quit", priority=True, show=False),
    ]

    def __init__(self, backend: ChatBackend) -> None:
        super().__init__()
        self.backend = backend
        self.session_id: str | None = None
        self._jobs: deque[Job] = deque()
        self._working = False
        self._awaiting_answer = False

    # --- layout and input ----------------------------------------------------------

    def compose(self) -> ComposeResult:
        """Log on top, status line, input at the bottom."""
        yield ChatLog(id="log")
        yield StatusLine(id="status")
        yield Input(placeholder="Message PicoBot  (/help for commands)", id="prompt")

    def on_mount(self) -> None:
        """Show the current session's recent history, then take input."""
        self._refresh_status()
        self.query_one("#prompt", Input).focus()
        self._enqueue(self._show_history)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter sends the message (slash commands too); blank input is ignored."""
        event.stop()
        text = event.value.strip()
        event.input.clear()
        if text:
            self._enqueue(partial(self._send, text))

    @property
    def chat_log(self) -> ChatLog:
        """The conversation widget."""
        return self.query_one("#log", ChatLog)

    @property
    def busy(self) -> bool:
        """True while a job runs or waits to run."""
        return self._working or bool(self._jobs)

    # --- the job queue ---------------------------------------------------------------

    def _enqueue(self, job: Job, *, first: bool = False) -> None:
        if first:
            self._jobs.appendleft(job)
        else:
            self._jobs.append(job)
        self._refresh_status()
        self._kick()

    def _kick(self) -> None:
        if self._working or self._awaiting_answer or not self._jobs:
            return
        self._working = True
        self.run_worker(self._drain(), name="picobot-turns", group="turns")

    async def _drain(self) -> None:
        try:
            # A pending confirmation holds back queued messages until it is answered.
            while self._jobs and not self._awaiting_answer:
                job = self._jobs.popleft()
                self._refresh_status()
                try:
                    await job()
                except UserError as exc:
                    await self.chat_log.add("error", str(exc))
                except Exception:
                    log.exception("TUI job failed")
                    await self.chat_log.add("error", GENERIC_FAILURE)
        finally:
            self._working = False
            self._refresh_status()

    # --- jobs --------------------------------------------------------------------------

    async def _send(self, text: str) -> None:
        await self.chat_log.add("user", text)
        await self._render_events(self.backend.send(text))

    async def _answer(self, token: str, answer: str) -> None:
        await self.chat_log.add("notice", f"You answered: {'yes' if answer == 'y' else 'no'}")
        await self._render_events(self.backend.confirm(token, answer))

    async def _show_history(self, *, switched: bool = False) -> None:
        session_id, lines = await self.backend.history(HISTORY_LIMIT)
        self._set_session(session_id)
        shown: list[tuple[Role, str]] = [
            ("user" if role == "user" else "assistant", content)
            for role, content in lines
            if role in ("user", "assistant")
        ]
        if shown:
            what = "the last" if len(shown) >= HISTORY_LIMIT else "all"
            heading = f"Session {session_id}: {what} {len(shown)} messages."
            await self.chat_log.add("notice", heading)
            await self.chat_log.add_all(shown)
        elif switched:
            await self.chat_log.add("notice", f"Session {session_id} has no messages yet.")
        else:
            await self.chat_log.add("notice", "Say hello. /help lists the commands.")

    # --- rendering events ----------------------------------------------------------------

    async def _render_events(self, events: AsyncIterator[Outbound]) -> None:
        """Render one turn's events; show a switched-to session's history afterwards."""
        chat = self.chat_log
        reply: ChatMessage | None = None
        before = self.session_id
        replied = False
        async for event in events:
            kind = event.kind
            if kind is OutboundKind.SESSION:
                self._set_session(event.session_id)
            elif kind is OutboundKind.TOKEN:
                if reply is None:
                    reply = await chat.add("assistant", streaming=True)
                reply.append(event.text)
            elif kind is OutboundKind.DONE:
                replied = True
                if reply is None:
                    reply = await chat.add("assistant")
                reply.finish(event.text)
                reply = None
                self._set_session(event.session_id)
            elif kind is OutboundKind.NOTICE:
                await chat.add("notice", event.text)
            elif kind is OutboundKind.ERROR:
                if reply is not None:
                    reply.finish(interrupted=True)
                    reply = None
                await chat.add("error", event.text)
            elif kind is OutboundKind.CONFIRM_REQUEST:
                await self._ask(event)
            else:  # pragma: no cover - a kind added to the contract but not here yet
                log.warning("unrendered event kind %s", kind)
        if reply is not None:
            # The stream ended without DONE (connection lost, cancelled): keep what came.
            reply.finish(interrupted=True)
        if not replied and before is not None and self.session_id != before:
            # /new, /resume, /fork: show where the conversation now stands.
            await self._show_history(switched=True)

    async def _ask(self, event: Outbound) -> None:
        if not event.token:
            log.warning("confirmation request without a token: %r", event.text)
            await self.chat_log.add("error", "A confirmation request arrived without a token.")
            return
        await self.chat_log.add("notice", event.text)
        self._awaiting_answer = True
        self._refresh_status()
        await self.push_screen(ConfirmScreen(event.text), partial(self._answered, event.token))

    def _answered(self, token: str, answer: str | None) -> None:
        self._awaiting_answer = False
        # Only an explicit yes is a yes.
        self._enqueue(partial(self._answer, token, "y" if answer == "y" else "n"), first=True)

    # --- status ------------------------------------------------------------------------

    def _set_session(self, session_id: str | None) -> None:
        if session_id and session_id != self.session_id:
            self.session_id = session_id
            self._refresh_status()

    def _refresh_status(self) -> None:
        if self._awaiting_answer:
            state = "waiting for your answer"
        elif self._working:
            state = "working…"
        else:
            state = ""
        if len(self._jobs) > 0 and (self._working or self._awaiting_answer):
            state += f" ({len(self._jobs)} queued)"
        try:
            status = self.query_one("#status", StatusLine)
        except NoMatches:  # not composed yet, or already torn down
            return
        status.show(self.session_id, self.backend.user_id, self.backend.model_name, state)
