"""WhatsApp Cloud API webhook (``/webhooks/whatsapp``).

Subscription: Meta checks the callback URL with ``GET ?hub.mode=subscribe&
hub.verify_token=<yours>&hub.challenge=<n>``; the challenge is echoed only when the
token matches. Notifications: ``POST`` bodies signed with the app secret in
``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>``, shaped
``{"object": "whatsapp_business_account", "entry": [{"changes": [{"value": {
"metadata": {"phone_number_id"}, "contacts": [...], "messages": [...]}}]}]}``.

Only ``type: "text"`` messages are chat messages; other types (media, reactions,
locations, ...) and ``statuses`` updates (sent/delivered/read of our replies) are
skipped. The user id is ``whatsapp:<wa_id>@s.whatsapp.net`` from the message's
``from``, which the app secret's signature covers, and so does the message's
``timestamp`` (Unix seconds, as a string): the core drops a message older than
``max_message_age_secs``, so a captured request cannot be replayed for ever. Replies go to
``POST {graph_base_url}/{phone_number_id}/messages``, 4096 characters per message
(longer replies are sent as several messages, in order). A document (``/export``, at
most 100 MB) is uploaded first, ``POST {graph_base_url}/{phone_number_id}/media`` as
multipart/form-data (``messaging_product``, ``type``, ``file``; as ``text/plain``, the
one supported document type a JSON Lines file is), and the answer's media id is then
sent as a ``document`` message with its file name and caption. Meta keeps uploaded
media for up to 30 days.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import aiohttp
from aiohttp import web

from picobot.channels.webhook.base import DeliveryError, Document, PlatformMessage, WebhookError
from picobot.channels.webhook.common import (
    ApiAnswer,
    ReplyApi,
    load_object,
    message_id,
    objects,
    optional,
    required,
    safe_name,
    split_text,
)
from picobot.channels.webhook.documents import UPLOAD_TIMEOUT, caption, open_document
from picobot.channels.webhook.signing import (
    hmac_sha256_hex,
    require_secret,
    same,
    secret_from_env,
    seen_key,
)
from picobot.config.channels import WhatsAppSettings

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Hub-Signature-256"
MAX_TEXT_CHARS = 4096
"""Longest text body the Cloud API accepts in one message."""
MAX_DOCUMENT_BYTES = 100 * 1000 * 1000
"""The largest document the Cloud API takes."""
MAX_CAPTION_CHARS = 1024
DOCUMENT_TYPE = "text/plain"
"""What an export is uploaded as: JSON Lines is text, and the Cloud API supports no
other text type for documents."""
MAX_CHALLENGE_CHARS = 256
_NUMBER_ID = re.compile(r"[0-9]{1,32}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
RATE_LIMIT_CODES = frozenset({4, 80007, 130429, 131048, 131056})
"""Graph error codes of throttling (app, account, throughput, spam, per-pair): these
come as HTTP 400 but are worth retrying later."""


class WhatsAppPlatform:
    """The WhatsApp Cloud API: GET verification, signed notifications, Graph replies."""

    def __init__(
        self,
        settings: WhatsAppSettings,
        *,
        verify_token: str,
        app_secret: str,
        access_token: str,
    ) -> None:
        self._settings = settings
        self._verify_token = require_secret(
            verify_token, settings.verify_token_env, "WhatsApp verify token"
        )
        self._app_secret = require_secret(
            app_secret, settings.app_secret_env, "WhatsApp app secret"
        )
        access_token = require_secret(
            access_token, settings.access_token_env, "WhatsApp access token"
        )
        self._auth = {"Authorization": f"Bearer {access_token}"}
        self._allowed = frozenset(settings.allowed_senders)
        self._api = ReplyApi("WhatsApp Graph API", secrets=(access_token,))
        self._media = ReplyApi("WhatsApp media upload", secrets=(access_token,))

    @classmethod
    def from_settings(cls, settings: WhatsAppSettings) -> WhatsAppPlatform:
        """Build from config; each secret comes from the env var the config names."""
        key = "channels.webhook.whatsapp"
        return cls(
            settings,
            verify_token=secret_from_env(settings.verify_token_env, f"{key}.verify_token_env"),
            app_secret=secret_from_env(settings.app_secret_env, f"{key}.app_secret_env"),
            access_token=secret_from_env(settings.access_token_env, f"{key}.access_token_env"),
        )

    @property
    def name(self) -> str:
        """Always ``whatsapp``."""
        return "whatsapp"

    @property
    def allowed_senders(self) -> frozenset[str]:
        """wa_ids allowed to chat; empty means everyone who can message the number."""
        return self._allowed

    @property
    def max_text_chars(self) -> int:
        """The Cloud API's limit of one text body."""
        return MAX_TEXT_CHARS

    @property
    def max_document_bytes(self) -> int:
        """The Cloud API's limit of a document."""
        return MAX_DOCUMENT_BYTES

    async def handshake(self, request: web.Request, body: bytes) -> web.Response | None:
        """Answer Meta's GET subscription check; anything else is not a handshake."""
        if request.method != "GET" or "hub.mode" not in request.query:
            return None
        query = request.query
        if query.get("hub.mode") != "subscribe":
            raise WebhookError(400, "unsupported hub.mode")
        challenge = query.get("hub.challenge", "")
        if not challenge or len(challenge) > MAX_CHALLENGE_CHARS:
            raise WebhookError(400, "missing or oversized hub.challenge")
        if not same(query.get("hub.verify_token"), self._verify_token):
            raise WebhookError(403, "verify token mismatch")
        log.info("whatsapp webhook subscription verified")
        return web.Response(text=challenge, content_type="text/plain")

    def verify(self, request: web.Request, body: bytes) -> None:
        """Check ``X-Hub-Signature-256`` over the raw body in constant time."""
        given = request.headers.get(SIGNATURE_HEADER)
        if not given:
            raise WebhookError(401, "missing signature")
        if not same(given.strip(), "sha256=" + hmac_sha256_hex(self._app_secret, body)):
            raise WebhookError(401, "invalid signature")

    def seen_key(self, message_id: str) -> bytes:
        """The replay-guard key of a message id, keyed with the app secret."""
        return seen_key(self._app_secret, self.name, message_id)

    def parse(self, body: bytes) -> list[PlatformMessage]:
        """The text messages of a verified notification, in order."""
        data = load_object(body)
        if data.get("object") != "whatsapp_business_account":
            raise WebhookError(400, "object must be whatsapp_business_account")
        found: list[PlatformMessage] = []
        for entry in objects(data, "entry", "body"):
            for change in objects(entry, "changes", "entry"):
                value = optional(change, "value", dict, "change") or {}
                found += self._messages(value)
        return found

    def _messages(self, value: dict[str, Any]) -> list[PlatformMessage]:
        metadata = optional(value, "metadata", dict, "value") or {}
        phone_number_id = optional(metadata, "phone_number_id", str, "metadata")
        if phone_number_id is not None and not _NUMBER_ID.fullmatch(phone_number_id):
            # It becomes a path segment of the reply URL.
            raise WebhookError(400, "metadata.phone_number_id is not a number id")
        configured = self._settings.phone_number_id
        if configured and phone_number_id and phone_number_id != configured:
            # One Meta app may serve several numbers; this bot answers for one.
            log.info("whatsapp webhook: skipped messages for another number")
            return []
        reply_from = phone_number_id or configured
        found: list[PlatformMessage] = []
        for msg in objects(value, "messages", "value"):
            if msg.get("type") != "text":
                continue
            wa_id = safe_name(required(msg, "from", str, "message"), "message.from")
            msg_id = message_id(required(msg, "id", str, "message"), "message.id")
            sent = required(msg, "timestamp", str, "message")
            if not _TIMESTAMP.fullmatch(sent):
                raise WebhookError(400, "message.timestamp is not a Unix time")
            text = required(required(msg, "text", dict, "message"), "body", str, "message.text")
            if not text.strip():
                continue
            found.append(
                PlatformMessage(
                    message_id=msg_id,
                    user_id=f"whatsapp:{wa_id}@s.whatsapp.net",
                    chat_id=wa_id,
                    sender=wa_id,
                    text=text,
                    reply_to={
                        "to": wa_id,
                        "phone_number_id": reply_from,
                        "reply_to_message_id": msg_id,
                    },
                    sent_at=float(sent),
                )
            )
        return found

    async def send(
        self, session: aiohttp.ClientSession, reply_to: dict[str, Any], text: str
    ) -> None:
        """Send ``text`` to ``reply_to["to"]``, as several messages if it is long.

        Replies are queued cut to :attr:`max_text_chars` already, so each part is sent
        and retried on its own; this only splits a reply queued whole by an older version.
        """
        to, base = self._target(reply_to)
        for part in split_text(text, MAX_TEXT_CHARS):
            payload = {
                "messaging_product": "whatsapp",
                "to": to,
                "type": "text",
                "text": {"body": part},
            }
            _check(
                self._api, await self._api.post(session, f"{base}/messages", payload, self._auth)
            )

    async def send_document(
        self, session: aiohttp.ClientSession, reply_to: dict[str, Any], document: Document
    ) -> None:
        """Upload the file as media, then send it as a ``document`` message.

        Each attempt uploads again: a media id is only used by the message it was
        uploaded for.
        """
        to, base = self._target(reply_to)
        with open_document(document, MAX_DOCUMENT_BYTES, self._media) as file:
            form = aiohttp.FormData()
            form.add_field("messaging_product", "whatsapp")
            form.add_field("type", DOCUMENT_TYPE)
            form.add_field("file", file, filename=document.filename, content_type=DOCUMENT_TYPE)
            answer = await self._media.post_data(
                session, f"{base}/media", form, self._auth, deadline=UPLOAD_TIMEOUT
            )
        _check(self._media, answer)
        media_id = answer.field("id")
        if not isinstance(media_id, str) or not media_id:
            raise self._media.error(f"{self._media.service}: no media id in the answer", retry=True)
        sent: dict[str, Any] = {"id": media_id, "filename": document.filename}
        if document.caption.strip():
            sent["caption"] = caption(document.caption, MAX_CAPTION_CHARS)
        payload = {
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": to,
            "type": "document",
            "document": sent,
        }
        _check(self._api, await self._api.post(session, f"{base}/messages", payload, self._auth))

    def _target(self, reply_to: dict[str, Any]) -> tuple[str, str]:
        """The recipient of a reply, and the Graph URL of the number it is sent from."""
        to = reply_to.get("to")
        number = reply_to.get("phone_number_id") or self._settings.phone_number_id
        if not isinstance(to, str) or not to:
            raise DeliveryError("WhatsApp reply without a recipient", retry=False)
        if not isinstance(number, str) or not number:
            raise DeliveryError("no WhatsApp phone_number_id to send from", retry=False)
        return to, f"{self._settings.graph_base_url.rstrip('/')}/{number}"


def _check(api: ReplyApi, answer: ApiAnswer) -> None:
    """Return if the Graph API took the call, else raise its DeliveryError (throttling,
    which comes as HTTP 400, is worth retrying)."""
    if not answer.ok:
        code = answer.field("error", "code")
        detail = f"({code}) {answer.field('error', 'message')}" if code else None
        throttled = code in RATE_LIMIT_CODES
        raise api.failure(answer, detail, retry=True if throttled else None)
