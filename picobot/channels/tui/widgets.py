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


class ChatMessage(Static):
    """One line of the chat log: a user or bot message, a notice or an error.

    Text is shown literally (never parsed as markup): it comes from users and models.
    """

    def __init__(self, role: Role, text: str = "", *, streaming: bool = False) -> None:
        self.role: Role = role
        self._text = text
        self.streaming = streaming
        self.interrupted = False
        super().__init__(self._compose_content(), markup=False, classes=f"message {role}")

    @property
    def text(self) -> str:
        """The message text so far (without label or cursor)."""
        return self._text

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
            self.interrupted = True
            self.add_class("interrupted")
        self.update(self._compose_content())

    def _compose_content(self) -> Content:
        label = _LABELS[self.role]
        head: tuple[str, str] = (f"{label}: ", "bold") if label else ("", "")
        tail = _CURSOR if self.streaming else ""
        if self.interrupted:
            tail = " [interrupted]"
        return Content.assemble(head, self._text, tail)


class ChatLog(VerticalScroll):
    """The scrollable conversation; stays pinned to the newest line unless scrolled up."""

    def on_mount(self) -> None:
        """Keep the newest message in view."""
        self.anchor()

    async def add(self, role: Role, text: str = "", *, streaming: bool = False) -> ChatMessage:
        """Append one message and return its widget (to stream into)."""
        message = ChatMessage(role, text, streaming=streaming)
        await self.mount(message)
        return message

    async def add_all(self, messages: Iterable[tuple[Role, str]]) -> None:
        """Append several finished messages at once."""
        widgets = [ChatMessage(role, text) for role, text in messages]
        if widgets:
            await self.mount_all(widgets)

    def messages(self) -> list[ChatMessage]:
        """The messages shown, oldest first."""
        return list(self.query(ChatMessage))


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
