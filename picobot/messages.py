"""The channel <-> kernel contract: who is talking, what came in, what goes out.

Channels build :class:`Inbound` from what they authenticated and render the stream of
:class:`Outbound` events that the kernel yields. Nothing else crosses that line.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated speaker: set by the channel adapter, never by client input.

    ``user_id`` follows the per-channel forms of docs/architecture.md, e.g. ``tui:local``,
    ``ws:<key prefix>``, ``telegram:<id>``; ``chat_id`` names the conversation place
    (a terminal, a socket, a chat) so that each chat has one current session.
    """

    channel: str
    user_id: str
    chat_id: str


@dataclass(frozen=True, slots=True)
class Inbound:
    """One message from an identity; ``session_id`` optionally asks for a session."""

    identity: Identity
    text: str
    session_id: str | None = None
    message_id: str | None = None


class OutboundKind(StrEnum):
    """The kinds of event a turn can emit."""

    SESSION = "session"
    TOKEN = "token"  # noqa: S105 - a streamed text token, not a secret
    DONE = "done"
    NOTICE = "notice"
    CONFIRM_REQUEST = "confirm_request"
    ERROR = "error"
    DOCUMENT = "document"


@dataclass(frozen=True, slots=True)
class Outbound:
    """One event for the channel to render.

    ``text`` is the token, the full reply (DONE), the notice, the error message or a
    document's caption; ``token`` is set on CONFIRM_REQUEST; ``code`` is a short
    machine-readable error code; ``path`` is set on DOCUMENT: the file to hand over (a
    user's export file under the data directory, which the channel deletes once it is
    sent or given up on).
    """

    kind: OutboundKind
    text: str = ""
    session_id: str | None = None
    token: str | None = None
    code: str | None = None
    path: str | None = None


def storable(*texts: str) -> bool:
    """Whether every text can be stored as UTF-8 (JSON allows lone surrogates; SQLite not)."""
    try:
        for text in texts:
            text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def notice(text: str, session_id: str | None = None) -> Outbound:
    """Build a NOTICE event."""
    return Outbound(OutboundKind.NOTICE, text, session_id=session_id)


def document(path: str, caption: str, session_id: str | None = None) -> Outbound:
    """Build a DOCUMENT event: the file at ``path``, shown with ``caption``."""
    return Outbound(OutboundKind.DOCUMENT, caption, session_id=session_id, path=path)


def error(text: str, code: str = "error", session_id: str | None = None) -> Outbound:
    """Build an ERROR event whose text is safe to show to the user."""
    return Outbound(OutboundKind.ERROR, text, session_id=session_id, code=code)
