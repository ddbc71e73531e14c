"""The Textual chat app: renders kernel events, sends what the user types.

Every backend call runs in a worker, one job at a time, so the UI stays responsive and
events land in the order asked. Messages typed while a reply streams are queued (and
shown at once, marked ``[queued]``); an answer to a confirmation (sent with its token)
jumps the queue, so queued messages cannot make the confirmation expire.

Quitting while a reply streams waits up to :attr:`PicoBotApp.QUIT_GRACE_SECS` for it to
finish, so it is stored; a second Ctrl+Q quits at once. Queued messages are not sent;
:func:`run_chat` prints them after the screen closes, so nothing is lost silently.
"""

from __future__ import annotations

import logging
import sys
import textwrap
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
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

ACTIVITY_REFRESH_SECS = 0.5
"""How often the status line asks what a turn in progress is waiting for."""

log = logging.getLogger(__name__)

HISTORY_LIMIT = 50
GENERIC_FAILURE = "Something went wrong talking to PicoBot; details are in the log file."


@dataclass(frozen=True, slots=True)
class Job:
    """One backend call for the worker; ``line`` is the user's message a send shows."""

    run: Callable[[], Awaitable[None]]
    line: ChatMessage | None = None


class PicoBotApp(App[None]):
    """Chat log, status line and input, attached to a :class:`ChatBackend`."""

    TITLE = "PicoBot"
    QUIT_GRACE_SECS: ClassVar[float] = 5.0
    """How long quitting waits for a streaming reply to finish (and be stored)."""
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
        self._working = False  # a worker is draining the queue
        self._current_job: Job | None = None
        self._awaiting_answer = False
        self._quitting = False
        self.unsent: list[str] = []
        """Queued messages dropped by quitting, never sent (oldest first)."""
        self.cut_off: str | None = None
        """Set if quitting cancelled a turn: the message whose reply was not stored."""

    # --- layout and input ----------------------------------------------------------

    def compose(self) -> ComposeResult:
        """Log on top, status line, input at the bottom."""
        yield ChatLog(id="log")
        yield StatusLine(id="status")
        yield Input(placeholder="Message PicoBot  (/help for commands)", id="prompt")

    def on_mount(self) -> None:
        """Show the current session's recent history, then take input."""
        self._refresh_status()
        # While working, the status line says what the wait is (reading a long prompt).
        self.set_interval(ACTIVITY_REFRESH_SECS, self._refresh_working)
        self.query_one("#prompt", Input).focus()
        self._enqueue(Job(self._show_history))

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter sends the message (slash commands too); blank input is ignored.

        The message is shown at once; if it has to wait its turn, marked ``[queued]``.
        """
        event.stop()
        text = event.value.strip()
        event.input.clear()
        if not text or self._quitting:
            return
        if self.busy or self._awaiting_answer:
            line = await self.chat_log.add_pending(text)
        else:
            line = await self.chat_log.add("user", text)
        self._enqueue(Job(partial(self._send, line), line))

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
        if self._working or self._awaiting_answer or self._quitting or not self._jobs:
            return
        self._working = True
        self.run_worker(self._drain(), name="picobot-turns", group="turns")

    async def _drain(self) -> None:
        try:
            # A pending confirmation holds back queued messages until it is answered.
            while self._jobs and not self._awaiting_answer:
                job = self._current_job = self._jobs.popleft()
                self._refresh_status()
                try:
                    await job.run()
                except UserError as exc:
                    await self.chat_log.add("error", str(exc))
                except Exception:
                    log.exception("TUI job failed")
                    await self.chat_log.add("error", GENERIC_FAILURE)
        finally:
            self._working = False
            self._current_job = None
            self._refresh_status()
            if self._quitting:
                self.exit()  # the reply quitting waited for is stored

    # --- jobs --------------------------------------------------------------------------

    async def _send(self, line: ChatMessage) -> None:
        line.mark_sent()
        await self._render_events(self.backend.send(line.text))

    async def _answer(self, token: str, answer: str) -> None:
        await self.chat_log.add("notice", f"You answered: {'yes' if answer == 'y' else 'no'}")
        await self._render_events(self.backend.confirm(token, answer))
        if answer == "y":
            await self._resync_session()

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
        self._enqueue(Job(partial(self._answer, token, "y" if answer == "y" else "n")), first=True)

    # --- quitting ----------------------------------------------------------------------

    async def action_quit(self) -> None:
        """Quit; a turn under way first gets a short grace to finish and be stored.

        Queued messages are dropped (marked ``[not sent]``, listed by :func:`run_chat`).
        Pressed again, or once the grace runs out, it quits at once, cancelling the turn.
        """
        if self._quitting or not self._working:
            self._quit_now()
            return
        self._quitting = True
        self.query_one("#prompt", Input).disabled = True
        dropped = self._drop_queue()
        waiting = f"Quitting once the reply is stored (up to {self.QUIT_GRACE_SECS:g} s)."
        if dropped:
            waiting += f" {_count(dropped, 'queued message')} will not be sent."
        await self.chat_log.add("notice", f"{waiting} Press Ctrl+Q again to quit now.", last=True)
        self._refresh_status()
        self.set_timer(self.QUIT_GRACE_SECS, self._quit_now)

    def _quit_now(self) -> None:
        self._drop_queue()
        if self._current_job is not None and self._current_job.line is not None:
            self.cut_off = self._current_job.line.text
        self.exit()

    def _drop_queue(self) -> int:
        dropped = [job.line for job in self._jobs if job.line is not None]
        self._jobs.clear()
        for line in dropped:
            line.mark_unsent()
            self.unsent.append(line.text)
        return len(dropped)

    def farewell(self) -> str:
        """What quitting left undone, for the terminal once the UI is gone ("" if nothing)."""
        lines: list[str] = []
        if self.cut_off is not None:
            lines.append(
                f"picobot tui: quit before the reply to {_quote(self.cut_off)} was complete;"
                " the reply was not stored."
            )
        if self.unsent:
            lines.append(f"picobot tui: {_count(len(self.unsent), 'queued message')} not sent:")
            lines.extend(textwrap.indent(text, "  ", lambda _: True) for text in self.unsent)
        return "\n".join(lines)

    # --- status ------------------------------------------------------------------------

    def _set_session(self, session_id: str | None) -> None:
        if session_id and session_id != self.session_id:
            self.session_id = session_id
            self._refresh_status()

    async def _resync_session(self) -> None:
        """Ask which session is current: a purge may have deleted the one shown."""
        session_id, _ = await self.backend.history(1)
        if session_id != self.session_id:
            self.session_id = session_id  # None: gone; the next message starts a new one
            self._refresh_status()

    def _refresh_working(self) -> None:
        if self._working:
            self._refresh_status()

    def _refresh_status(self) -> None:
        if self._quitting:
            state = "quitting once the reply is stored…"
        elif self._awaiting_answer:
            state = "waiting for your answer"
        elif self._working:
            state = "working…"
            # What a long wait is, where the backend can tell (the in-process model).
            activity = getattr(self.backend, "activity", None)
            doing = activity() if callable(activity) else ""
            if doing:
                state = f"working… ({doing})"
        else:
            state = ""
        if len(self._jobs) > 0 and (self._working or self._awaiting_answer):
            state += f" ({len(self._jobs)} queued)"
        try:
            status = self.query_one("#status", StatusLine)
        except NoMatches:  # not composed yet, or already torn down
            return
        status.show(self.session_id, self.backend.user_id, self.backend.model_name, state)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _quote(text: str, width: int = 60) -> str:
    """The start of a message, to name it on one line."""
    first = text.splitlines()[0] if text.strip() else text
    if len(first) > width or first != text:
        first = first[: width - 1].rstrip() + "…"
    return f"“{first}”"


async def run_chat(backend: ChatBackend) -> None:
    """Run the chat UI on ``backend`` until the user quits.

    Then print on stderr, where it stays visible, what quitting left undone: a reply cut
    off before it was stored, and the queued messages that were never sent (in full, so
    they can be copied).
    """
    app = PicoBotApp(backend)
    await app.run_async()
    if farewell := app.farewell():
        print(farewell, file=sys.stderr)
