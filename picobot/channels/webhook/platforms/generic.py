"""A generic signed JSON webhook (``/webhooks/generic``) for your own integrations.

Inbound: ``POST`` a JSON object ``{"user", "chat", "text", "message_id"}`` (all
non-empty strings) with the header ``X-PicoBot-Signature: sha256=<hex>``, the
HMAC-SHA256 of the raw body under the shared secret. A message with the same
``message_id``, ``user`` and ``chat`` as an earlier one is a redelivery and is not
answered again (:func:`inbox_key`). Outbound: each reply is POSTed to ``callback_url``
as ``{"chat", "user", "text", "in_reply_to"}`` (``in_reply_to`` is the message_id as
sent), signed the same way in the same header, so the receiver can check that it came
from PicoBot.

Trust model: this webhook trusts its signer. Whoever holds the secret (your
integration) vouches for ``user``, and may speak as any user of this channel; without
the secret nobody can. The user id is ``generic:<user>``, so a signer can never
impersonate a user of another channel (``generic:telegram:42`` is not
``telegram:42``). Give the secret only to a system that authenticates its own users.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp
from aiohttp import web

from picobot.channels.webhook.base import PlatformMessage, WebhookError
from picobot.channels.webhook.common import ReplyApi, http_url, load_object
from picobot.channels.webhook.signing import hmac_sha256_hex, same, secret_from_env
from picobot.config.channels import GenericWebhookSettings
from picobot.errors import ConfigError

log = logging.getLogger(__name__)

MAX_ID_CHARS = 256
"""Longest user, chat or message id accepted."""
MAX_TEXT_CHARS = 32_000
"""Longest message text accepted."""
CALLBACK_URL_KEY = "channels.webhook.generic.callback_url"


def sign(secret: bytes, body: bytes) -> str:
    """The signature header value for ``body``: ``sha256=<hex HMAC-SHA256>``."""
    return "sha256=" + hmac_sha256_hex(secret, body)


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

    def __init__(self, settings: GenericWebhookSettings, secret: str) -> None:
        if not secret:
            raise ConfigError(f"the generic webhook secret ({settings.secret_env}) is empty")
        # Checked now: without a usable URL every reply would fail after its retries.
        self._callback_url = http_url(settings.callback_url, CALLBACK_URL_KEY)
        self._settings = settings
        self._secret = secret.encode()
        self._allowed = frozenset(settings.allowed_senders)
        self._api = ReplyApi("callback")

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

    async def handshake(self, request: web.Request, body: bytes) -> web.Response | None:
        """There is no handshake."""
        return None

    def verify(self, request: web.Request, body: bytes) -> None:
        """Check the HMAC-SHA256 signature of the raw body in constant time."""
        given = request.headers.get(self._settings.signature_header, "")
        if not given:
            raise WebhookError(401, "missing signature")
        if not same(given.strip(), sign(self._secret, body)):
            raise WebhookError(401, "invalid signature")

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
        signature = {self._settings.signature_header: sign(self._secret, body)}
        answer = await self._api.post_body(session, self._callback_url, body, signature)
        if not answer.ok:
            raise self._api.failure(answer)
