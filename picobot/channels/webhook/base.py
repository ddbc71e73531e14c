"""The platform protocol every webhook platform module implements.

The webhook core (``channels/webhook/server.py``) owns what all platforms share: the
body size limit, reading the raw body, the durable inbox with de-duplication by
message id, acknowledging at once, running turns in the background, and the durable
outbound queue with retries. A platform module only knows its own wire format:

- :meth:`Platform.verify` checks the signature over the RAW body before anything is
  parsed, and raises :class:`WebhookError` (401/403) when it does not hold;
- :meth:`Platform.handshake` answers platform-specific requests that are not messages
  (WhatsApp's GET verification, Slack's url_verification challenge);
- :meth:`Platform.parse` turns a verified body into :class:`PlatformMessage` items,
  with the user id built from the authenticated payload in the channel's documented
  form (never from a field the sender can choose freely), and the time the platform
  vouches the message was sent, where it does (the core drops stale ones);
- :meth:`Platform.seen_key` gives a message's replay-guard key, keyed with the
  platform's secret (see :mod:`picobot.store.channels.webhook_seen`);
- :meth:`Platform.send` delivers one reply through the platform's API and raises
  :class:`DeliveryError` (``retry`` True for 429/5xx/network errors); a reply longer
  than :attr:`Platform.max_text_chars` is cut into several before it is queued;
- :meth:`Platform.send_document` hands over a file (a user's ``/export``) through the
  platform's file API, where :attr:`Platform.max_document_bytes` says it has one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from picobot.store.keys.sealing import Sealer


class WebhookError(Exception):
    """A bad webhook request: answered with ``status`` and a short ``reason``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class DeliveryError(Exception):
    """A reply could not be delivered; ``retry`` says whether trying again may help."""

    def __init__(self, reason: str, *, retry: bool, retry_after_secs: float | None = None):
        super().__init__(reason)
        self.retry = retry
        self.retry_after_secs = retry_after_secs


class AnswerTooLarge(DeliveryError):
    """A platform's answer was longer than the caller would read (retryable)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, retry=True)


@dataclass(frozen=True, slots=True)
class PlatformMessage:
    """One inbound chat message from a platform.

    ``message_id`` is the platform's id (used to de-duplicate redeliveries);
    ``user_id`` is the full PicoBot user id (e.g. ``telegram:42``); ``sender`` is the
    platform-native sender id checked against ``allowed_senders``; ``reply_to`` holds
    what :meth:`Platform.send` needs to answer (JSON-serializable, stored in the queue).
    ``sent_at`` is when the message was sent (epoch seconds) as the authenticated
    body says, or None where the request's signed timestamp was checked instead.
    """

    message_id: str
    user_id: str
    chat_id: str
    sender: str
    text: str
    reply_to: dict[str, Any] = field(default_factory=dict)
    sent_at: float | None = None


@dataclass(frozen=True, slots=True)
class Document:
    """A file to hand over in a chat: read from ``path`` and opened with ``sealer`` at
    each attempt (never kept in the queue), shown to the user as ``filename`` with
    ``caption``; ``size`` in bytes once opened."""

    path: Path
    filename: str
    caption: str
    size: int
    sealer: Sealer


class Platform(Protocol):
    """A messaging platform's webhook format and reply API."""

    @property
    def name(self) -> str:
        """Short name: route /webhooks/<name>, channel name of the Identity."""
        ...

    @property
    def allowed_senders(self) -> frozenset[str]:
        """Senders allowed to chat; empty means everyone who passes verification."""
        ...

    @property
    def max_text_chars(self) -> int | None:
        """Longest text of one message (UTF-16 units), or None for no limit.

        A longer reply is queued as several messages, each delivered (and retried) on
        its own, so a retry never repeats a part the chat has already shown.
        """
        ...

    @property
    def max_document_bytes(self) -> int | None:
        """The largest file :meth:`send_document` hands over, or None when the platform
        cannot carry files (the user is told so instead)."""
        ...

    async def handshake(self, request: web.Request, body: bytes) -> web.Response | None:
        """Answer a non-message request (verification challenge), or None."""
        ...

    def verify(self, request: web.Request, body: bytes) -> None:
        """Raise WebhookError unless the request is authentically from the platform."""
        ...

    def seen_key(self, message_id: str) -> bytes:
        """The content-free replay-guard key of a message id (HMAC under our secret)."""
        ...

    def parse(self, body: bytes) -> list[PlatformMessage]:
        """Chat messages in a verified body (others, e.g. bot echoes, are skipped).

        Raises WebhookError(400, ...) for a malformed body.
        """
        ...

    async def send(
        self, session: aiohttp.ClientSession, reply_to: dict[str, Any], text: str
    ) -> None:
        """Deliver one reply; raise DeliveryError on failure."""
        ...

    async def send_document(
        self, session: aiohttp.ClientSession, reply_to: dict[str, Any], document: Document
    ) -> None:
        """Hand over one file with its caption; raise DeliveryError on failure (a file
        over :attr:`max_document_bytes` or a platform without files: a final one)."""
        ...
