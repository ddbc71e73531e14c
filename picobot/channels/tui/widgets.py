"""The TUI's widgets: they display what they are given and report what the user chose.

No widget calls the backend; the app feeds them kernel events and reacts to their
messages (``Input.Submitted``, the confirmation screen's result).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, Literal

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static

Role = Literal["user", "assistant", "notice", "error"]

_LABELS: dict[Role, str] = {"user": "you", "assistant": "bot", "notice": "", "error": "error"}
_CURSOR = "▌"

Mark = Literal["queued", "not sent", "interrupted"]
_MARK_CLASSES: dict[Mark, str] = {
    "queued": "pending",
    "not sent": "unsent",
    "interrupted": "interrupted",
}


class ChatMessage(Static):
    """One line of the chat log: a user or bot message, a notice or an error.

    Text is shown literally (never parsed as markup): it comes from users and models.
    A user's message typed while a reply streams waits ``[queued]`` at the bottom of the
    log until it is sent, or says ``[not sent]`` if quitting dropped it.
    """

    def __init__(
        self, role: Role, text: str = "", *, streaming: bool = False, pending: bool = False
    ) -> None:
        self.role: Role = role
        self._text = text
        self.streaming = streaming
        self._mark: Mark | None = "queued" if pending else None
        super().__init__(self._compose_content(), markup=False, classes=f"message {role}")
        self._style_mark()

    @property
    def text(self) -> str:
        """The message text so far (without label or cursor)."""
        return self._text

    @property
    def interrupted(self) -> bool:
        """True if the stream ended before the reply was complete."""
        return self._mark == "interrupted"

    @property
    def pending(self) -> bool:
        """True while the message waits in the queue, not yet sent."""
        return self._mark == "queued"

    @property
    def unsent(self) -> bool:
        """True if the message was dropped from the queue (the user quit) and never sent."""
        return self._mark == "not sent"

    def append(self, chunk: str) -> None:
        """Add a streamed piece of the text."""
        self._text += chunk
        self.update(self._compose_content())

    def finish(self, text: str | None = None, *, interrupted: bool = False) -> None:
        """End streaming; ``text`` replaces what was streamed when given and non-empty."""
        if text:
            self._text = text
        self.streaming = False
        if interrupted:
            self._set_mark("interrupted")
        self.update(self._compose_content())

    def mark_sent(self) -> None:
        """The queued message goes out now: drop the ``[queued]`` mark."""
        if self.pending:
            self._set_mark(None)

    def mark_unsent(self) -> None:
        """The queued message was dropped and will never be sent."""
        self._set_mark("not sent")

    def _set_mark(self, mark: Mark | None) -> None:
        self._mark = mark
        self._style_mark()
        self.update(self._compose_content())

    def _style_mark(self) -> None:
        for mark, css_class in _MARK_CLASSES.items():
            self.set_class(self._mark == mark, css_class)

    def _compose_content(self) -> Content:
        label = _LABELS[self.role]
        head: tuple[str, str] = (f"{label}: ", "bold") if label else ("", "")
        tail = _CURSOR if self.streaming else ""
        if self._mark is not None:
            tail = f" [{self._mark}]"
        return Content.assemble(head, self._text, tail)


class ChatLog(VerticalScroll):
    """The scrollable conversation; stays pinned to the newest line unless scrolled up.

    Queued user messages (and those quitting dropped) stay below everything else until
    they are sent, so a reply or notice is shown right under the message it answers.
    """

    def on_mount(self) -> None:
        """Keep the newest message in view."""
        self.anchor()

    async def add(
        self, role: Role, text: str = "", *, streaming: bool = False, last: bool = False
    ) -> ChatMessage:
        """Append one message above the queued ones (``last``: below them); return its
        widget (to stream into)."""
        message = ChatMessage(role, text, streaming=streaming)
        await self.mount(message, before=None if last else self._first_waiting())
        return message

    async def add_all(self, messages: Iterable[tuple[Role, str]]) -> None:
        """Append several finished messages at once, above the queued ones."""
        widgets = [ChatMessage(role, text) for role, text in messages]
        if widgets:
            await self.mount_all(widgets, before=self._first_waiting())

    async def add_pending(self, text: str) -> ChatMessage:
        """Append a user's message that waits in the queue, marked ``[queued]``."""
        message = ChatMessage("user", text, pending=True)
        await self.mount(message)
        return message

    def messages(self) -> list[ChatMessage]:
        """The messages shown, oldest first."""
        return list(self.query(ChatMessage))

    def _first_waiting(self) -> ChatMessage | None:
        return next((m for m in self.query(ChatMessage) if m.pending or m.unsent), None)


class StatusLine(Static):
    """Session, user and model, plus what the app is doing."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(markup=False, id=id)
        self.text = ""

    def show(self, session_id: str | None, user_id: str, model: str, state: str = "") -> None:
        """Redraw the line."""
        parts = [
            f"session {session_id or '(new)'}",
            f"user {user_id}",
            f"model {model or '(default)'}",
        ]
        # The state goes first so a narrow terminal cuts the model name, not the news.
        if state:
            parts.insert(0, state)
        self.text = " · ".join(parts)
        self.update(self.text)


class ConfirmScreen(ModalScreen[str]):
    """A yes/no question; dismissed with ``"y"`` or ``"n"`` (Escape and "No" are no)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer('y')", "Yes"),
        Binding("n", "answer('n')", "No"),
        Binding("escape", "answer('n')", "No"),
    ]
    # The safe answer has the focus, so a stray Enter declines.
    AUTO_FOCUS = "#no"

    def __init__(self, prompt: str) -> None:
        super().__init__()
        self.prompt = prompt

    def compose(self) -> ComposeResult:
        """The prompt above a Yes and a No button."""
        with Vertical(id="dialog"):
            yield Static(self.prompt, markup=False, id="question")
            with Horizontal(id="buttons"):
                yield Button("Yes (y)", variant="error", id="yes")
                yield Button("No (n)", variant="primary", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        """A click or Enter on a button answers."""
        event.stop()
        self.dismiss("y" if event.button.id == "yes" else "n")

    def action_answer(self, answer: str) -> None:
        """A key answers."""
        self.dismiss(answer)
