"""A generic signed JSON webhook (``/webhooks/generic``) for your own integrations.

Inbound: ``POST`` a JSON object ``{"user", "chat", "text", "message_id"}`` (all
non-empty strings) with the headers ``X-PicoBot-Timestamp: <Unix seconds>`` and
``X-PicoBot-Signature: sha256=<hex>``, the HMAC-SHA256 of ``<timestamp>.<raw body>``
under the shared secret (Slack's scheme). A timestamp more than
``timestamp_tolerance_secs`` from our clock is refused, so a captured request cannot
be replayed later; within the window, a message with the same ``message_id``,
``user`` and ``chat`` as an earlier one is a redelivery and is not answered again
(:func:`inbox_key`), also after a purge. With ``require_timestamp = false``, a request
without the timestamp header may sign the raw body alone (for clients that cannot be
updated yet). Outbound: each reply is POSTed to ``callback_url`` as ``{"chat",
"user", "text", "in_reply_to"}`` (``in_reply_to`` is the message_id as sent), signed
the same way in the same headers, so the receiver can check that it came from PicoBot
and is fresh. The callback carries text only: ``/export`` answers that it cannot send
a file here, and where else the user gets their data.

Trust model: this webhook trusts its signer. Whoever holds the secret (your
integration) vouches for ``user``, and may speak as any user of this channel; without
the secret nobody can. The user id is ``generic:<user>``, so a signer can never
impersonate a user of another channel (``generic:telegram:42`` is not
``telegram:42``). Give the secret only to a system that authenticates its own users.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from picobot.channels.webhook.base import DeliveryError, Document, PlatformMessage, WebhookError
from picobot.channels.webhook.common import ReplyApi, http_url, load_object
from picobot.channels.webhook.signing import (
    check_timestamp,
    hmac_sha256_hex,
    same,
    secret_from_env,
    seen_key,
)
from picobot.config.channels import GenericWebhookSettings
from picobot.errors import ConfigError

log = logging.getLogger(__name__)

MAX_ID_CHARS = 256
"""Longest user, chat or message id accepted."""
MAX_TEXT_CHARS = 32_000
"""Longest message text accepted."""
CALLBACK_URL_KEY = "channels.webhook.generic.callback_url"


def sign(secret: bytes, body: bytes, timestamp: str | None = None) -> str:
    """The signature header value: ``sha256=<hex HMAC-SHA256>`` of ``<timestamp>.<body>``,
    or of ``body`` alone when there is no timestamp (the legacy form)."""
    signed = body if timestamp is None else timestamp.encode() + b"." + body
    return "sha256=" + hmac_sha256_hex(secret, signed)


def _field(data: dict[str, Any], name: str, limit: int) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value.strip():
        raise WebhookError(400, f"'{name}' must be a non-empty string")
    if len(value) > limit:
        raise WebhookError(400, f"'{name}' is longer than {limit} characters")
    return value


def _id_field(data: dict[str, Any], name: str) -> str:
    value = _field(data, name, MAX_ID_CHARS)
    # Ids end up in user ids, logs and SQL keys: no control characters, no padding.
    if value != value.strip() or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise WebhookError(400, f"'{name}' has leading/trailing space or control characters")
    return value


def inbox_key(user: str, chat: str, message_id: str) -> str:
    """The de-duplication key of a message: its ``message_id`` within its user and chat.

    The signer picks message ids, and nothing makes them unique beyond one user's chat
    (two systems behind one secret may both count from 1), so only the same id from the
    same user in the same chat is a redelivery. JSON keeps the three apart even when
    they contain separators: ``("a:b", "c")`` and ``("a", "b:c")`` are two keys.
    """
    return json.dumps([user, chat, message_id], ensure_ascii=False, separators=(",", ":"))


class GenericPlatform:
    """The generic webhook: HMAC-signed JSON in, HMAC-signed JSON callbacks out."""

    def __init__(
        self,
        settings: GenericWebhookSettings,
        secret: str,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not secret:
            raise ConfigError(f"the generic webhook secret ({settings.secret_env}) is empty")
        # Checked now: without a usable URL every reply would fail after its retries.
        self._callback_url = http_url(settings.callback_url, CALLBACK_URL_KEY)
        self._settings = settings
        self._secret = secret.encode()
        self._allowed = frozenset(settings.allowed_senders)
        self._api = ReplyApi("callback")
        self._clock = clock

    @classmethod
    def from_settings(cls, settings: GenericWebhookSettings) -> GenericPlatform:
        """Build from config; the secret comes from the env var the config names."""
        key = "channels.webhook.generic.secret_env"
        return cls(settings, secret_from_env(settings.secret_env, key))

    @property
    def name(self) -> str:
        """Always ``generic``."""
        return "generic"

    @property
    def allowed_senders(self) -> frozenset[str]:
        """User names allowed to chat; empty means every signed message."""
        return self._allowed

    @property
    def max_text_chars(self) -> None:
        """None: the callback takes a reply of any length, whole."""
        return None

    @property
    def max_document_bytes(self) -> None:
        """None: the callback carries no files."""
        return None

    async def handshake(self, request: web.Request, body: bytes) -> web.Response | None:
        """There is no handshake."""
        return None

    def verify(self, request: web.Request, body: bytes) -> None:
        """Check the timestamp window, then the HMAC-SHA256 signature, in constant time.

        A request with a timestamp header is always checked the timestamped way; one
        without is refused unless ``require_timestamp`` is off.
        """
        given = request.headers.get(self._settings.signature_header, "")
        stamp = request.headers.get(self._settings.timestamp_header, "").strip()
        if not given:
            raise WebhookError(401, "missing signature")
        if not stamp and self._settings.require_timestamp:
            raise WebhookError(401, "missing timestamp")
        if stamp:
            check_timestamp(stamp, self._clock(), self._settings.timestamp_tolerance_secs)
        # The header string as sent is what was signed, so it is used as it is.
        if not same(given.strip(), sign(self._secret, body, stamp or None)):
            raise WebhookError(401, "invalid signature")

    def seen_key(self, message_id: str) -> bytes:
        """The replay-guard key of a message id, keyed with the shared secret."""
        return seen_key(self._secret, self.name, message_id)

    def parse(self, body: bytes) -> list[PlatformMessage]:
        """The one message of a verified body."""
        data = load_object(body)
        user = _id_field(data, "user")
        chat = _id_field(data, "chat")
        message_id = _id_field(data, "message_id")
        text = _field(data, "text", MAX_TEXT_CHARS)
        return [
            PlatformMessage(
                message_id=inbox_key(user, chat, message_id),
                user_id=f"generic:{user}",
                chat_id=chat,
                sender=user,
                text=text,
                reply_to={"chat": chat, "user": user, "in_reply_to": message_id},
            )
        ]

    async def send(
        self, session: aiohttp.ClientSession, reply_to: dict[str, Any], text: str
    ) -> None:
        """POST one signed reply to the callback URL (retry on 429, 5xx, network errors)."""
        body = json.dumps(
            {
                "chat": reply_to.get("chat"),
                "user": reply_to.get("user"),
                "text": text,
                "in_reply_to": reply_to.get("in_reply_to"),
            },
            ensure_ascii=False,
        ).encode()
        headers: dict[str, str] = {}
        stamp = None
        if self._settings.require_timestamp:
            stamp = str(int(self._clock()))
            headers[self._settings.timestamp_header] = stamp
        headers[self._settings.signature_header] = sign(self._secret, body, stamp)
        answer = await self._api.post_body(session, self._callback_url, body, headers)
        if not answer.ok:
            raise self._api.failure(answer)

    async def send_document(
        self, session: aiohttp.ClientSession, reply_to: dict[str, Any], document: Document
    ) -> None:
        """Never called (documents are replaced by a text before they are queued): a
        final DeliveryError."""
        raise DeliveryError("the generic webhook carries no files", retry=False)
