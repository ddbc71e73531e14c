"""What the terminal UI talks to: a small protocol, and its in-process implementation.

The UI only needs a stream of :class:`Outbound` events per message and the recent
history of the current session. Keeping that behind :class:`ChatBackend` lets the same
UI attach to a remote PicoBot over WebSocket later, with no change to the widgets.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol, runtime_checkable

from picobot.config.settings import Settings
from picobot.messages import Identity, Inbound, Outbound

HistoryLines = list[tuple[str, str]]


@runtime_checkable
class ChatBackend(Protocol):
    """The conversation service behind the TUI: local kernel or remote server."""

    @property
    def user_id(self) -> str:
        """The authenticated user id shown in the status line, e.g. ``tui:local``."""
        ...

    @property
    def model_name(self) -> str:
        """The model answering, shown in the status line."""
        ...

    def send(self, text: str) -> AsyncIterator[Outbound]:
        """Send one message (or slash command); yield the events of the turn."""
        ...

    async def history(self, limit: int) -> tuple[str | None, HistoryLines]:
        """The current session id and its last ``limit`` (role, content) pairs, oldest first."""
        ...

    def confirm(self, token: str, answer: str) -> AsyncIterator[Outbound]:
        """Answer the confirmation request ``token`` with ``y`` or ``n``; yield the events."""
        ...


class HistoryItem(Protocol):
    """One stored message as the kernel reports it."""

    @property
    def role(self) -> str:
        """``user``, ``assistant``, ``tool`` ..."""
        ...

    @property
    def content(self) -> str:
        """The message text."""
        ...


class RecentHistory(Protocol):
    """The kernel's answer to :meth:`KernelLike.recent_history`."""

    @property
    def session_id(self) -> str | None:
        """The chat's current session, None before the first message."""
        ...

    @property
    def messages(self) -> Sequence[HistoryItem]:
        """Recent messages, oldest first."""
        ...


class KernelLike(Protocol):
    """The part of the kernel the local backend uses."""

    def handle(self, inbound: Inbound) -> AsyncIterator[Outbound]:
        """Process one message; yield the events to render."""
        ...

    async def recent_history(self, identity: Identity, limit: int = 50) -> RecentHistory:
        """The chat's current session and its last ``limit`` messages."""
        ...

    def confirm(self, identity: Identity, token: str, answer: str) -> AsyncIterator[Outbound]:
        """Answer a confirmation request by its token."""
        ...


def tui_identity(settings: Settings) -> Identity:
    """The identity of the local terminal user: ``tui:<channels.tui.user_name>``."""
    return Identity(
        channel="tui", user_id=f"tui:{settings.channels.tui.user_name}", chat_id="local"
    )


class LocalBackend:
    """A :class:`ChatBackend` running the kernel in this process."""

    def __init__(
        self,
        kernel: KernelLike,
        identity: Identity,
        model_name: str = "",
        *,
        chat_model: object = None,
        background_model: object = None,
    ) -> None:
        """``chat_model`` and ``background_model``: the providers, asked what they are
        doing (see :meth:`activity`) where they can say (the local one can)."""
        self._kernel = kernel
        self._identity = identity
        self._model_name = model_name
        self._chat_model = chat_model
        self._background_model = background_model

    def activity(self) -> str:
        """What a long wait is: the model reading a long prompt, background work on it.

        "" when there is nothing to say (or the providers cannot tell).
        """
        said = []
        reading = getattr(self._chat_model, "reading", None)
        if isinstance(reading, int) and reading > 0:
            said.append(f"reading {reading:,} tokens of context")
        if getattr(self._background_model, "busy", False) is True:
            said.append("learning and summarizing in the background")
        return "; ".join(said)

    @property
    def user_id(self) -> str:
        """The terminal user's id."""
        return self._identity.user_id

    @property
    def model_name(self) -> str:
        """The provider's model name."""
        return self._model_name

    def send(self, text: str) -> AsyncIterator[Outbound]:
        """Hand the message to the kernel as this terminal's identity."""
        return self._kernel.handle(Inbound(self._identity, text))

    async def history(self, limit: int) -> tuple[str | None, HistoryLines]:
        """Recent messages of this terminal's current session."""
        recent = await self._kernel.recent_history(self._identity, limit)
        return recent.session_id, [(m.role, m.content) for m in recent.messages]

    def confirm(self, token: str, answer: str) -> AsyncIterator[Outbound]:
        """Answer by token; the kernel accepts it only from the identity that asked."""
        return self._kernel.confirm(self._identity, token, answer)
