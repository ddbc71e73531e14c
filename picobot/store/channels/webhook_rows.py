"""The row types of the webhook inbox and the reply queue, and their row mappers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from picobot.store.db import Row

PURGED_USER = ""
"""The ``user_id`` of a reply whose message was purged before it was answered: the
user is gone, and the reply must not bring their id back (nor count as their data).
Its text is sealed with the shared key (:data:`picobot.store.keys.keyring.SHARED`)."""

INBOX_COLUMNS = (
    "id, platform, message_id, user_id, chat_id, picobot_open(text) AS text, reply_to_json,"
    " attempts"
)
"""What :func:`inbox_item` reads, the text opened (it is sealed with its user's key)."""
OUTBOUND_COLUMNS = (
    "id, platform, user_id, chat_id, reply_to_json, picobot_open(text) AS text, attempts,"
    " next_attempt_at, inbox_id, seq, document"
)
"""What :func:`outbound_item` reads, the text opened (sealed with its owner's key)."""


class InboundMessage(Protocol):
    """What the inbox needs of a platform message (``PlatformMessage`` fits)."""

    @property
    def message_id(self) -> str: ...
    @property
    def user_id(self) -> str: ...
    @property
    def chat_id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def reply_to(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class InboxItem:
    """An accepted platform message waiting to be processed."""

    id: int
    platform: str
    message_id: str
    user_id: str
    chat_id: str
    text: str
    reply_to: dict[str, Any]
    attempts: int
    """How often processing was started (a message that keeps crashing us is dropped)."""


@dataclass(frozen=True, slots=True)
class QueuedDocument:
    """A reply that hands over a file: ``caption`` shown with the export file called
    ``document`` (its name under ``<data dir>/exports``, never its content)."""

    caption: str
    document: str


@dataclass(frozen=True, slots=True)
class OutboundItem:
    """A reply waiting to be delivered."""

    id: int
    platform: str
    user_id: str
    chat_id: str
    reply_to: dict[str, Any]
    text: str
    attempts: int
    next_attempt_at: float
    inbox_id: int | None
    seq: int
    document: str | None = None
    """The export file this reply hands over (``text`` is its caption), or None."""

    @property
    def purged(self) -> bool:
        """Whether its message was purged before it was answered (no user id is kept):
        the reply is deleted and erased once it is sent or given up on."""
        return self.user_id == PURGED_USER


def inbox_item(row: Row) -> InboxItem:
    """An inbox row as an :class:`InboxItem`."""
    return InboxItem(
        id=int(row["id"]),
        platform=str(row["platform"]),
        message_id=str(row["message_id"]),
        user_id=str(row["user_id"]),
        chat_id=str(row["chat_id"]),
        text=str(row["text"]),
        reply_to=json.loads(row["reply_to_json"]),
        attempts=int(row["attempts"]),
    )


def outbound_item(row: Row) -> OutboundItem:
    """A queue row as an :class:`OutboundItem`."""
    return OutboundItem(
        id=int(row["id"]),
        platform=str(row["platform"]),
        user_id=str(row["user_id"]),
        chat_id=str(row["chat_id"]),
        reply_to=json.loads(row["reply_to_json"]),
        text=str(row["text"]),
        attempts=int(row["attempts"]),
        next_attempt_at=float(row["next_attempt_at"]),
        inbox_id=None if row["inbox_id"] is None else int(row["inbox_id"]),
        seq=int(row["seq"]),
        document=None if row["document"] is None else str(row["document"]),
    )
