"""Slack Events API webhook (``/webhooks/slack``).

Slack signs every request: ``X-Slack-Signature: v0=<hex HMAC-SHA256>`` of
``v0:<X-Slack-Request-Timestamp>:<raw body>`` under the app's signing secret. A
timestamp more than five minutes away from our clock (either way) is refused, so a
captured request cannot be replayed later. The ``url_verification`` challenge sent
when the Request URL is set is answered only after that check.

Only ``event_callback`` events of ``type: "message"`` with a ``user`` and ``text`` and
no ``subtype`` or ``bot_id`` are chat messages: edits, deletions, joins and every
bot's messages (our own replies included) are skipped. Slack escapes ``&``, ``<``
and ``>`` in message text both ways: they are decoded in what the kernel gets and
encoded in what we post, so a reply cannot mention ``<!channel>`` or anyone else. The user id is
``slack:<team_id>:<user>``, the chat id the channel, and the message id the
``event_id``, which Slack keeps when it retries a delivery. A reply goes to
``POST {api_base_url}/chat.postMessage`` in the same channel, in the thread if the
message was in one; Slack recommends at most 4000 characters per message, so longer
replies are sent as several messages, in order. A document (``/export``, at most 100
MB) is uploaded the way Slack asks since ``files.upload`` was retired:
``files.getUploadURLExternal`` (its file name and length) answers an upload URL and a
file id, the bytes are POSTed to that URL, and ``files.completeUploadExternal`` shares
the file in the channel (thread) with the caption as its comment.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from picobot.channels.webhook.base import DeliveryError, Document, PlatformMessage, WebhookError
from picobot.channels.webhook.common import (
    ApiAnswer,
    ReplyApi,
    load_object,
    message_id,
    optional,
    required,
    safe_name,
    split_text,
)
from picobot.channels.webhook.documents import UPLOAD_TIMEOUT, open_document
from picobot.channels.webhook.signing import (
    check_timestamp,
    hmac_sha256_hex,
    require_secret,
    same,
    secret_from_env,
    seen_key,
)
from picobot.config.channels import SlackSettings
from picobot.config.sections import http_url_problem

SIGNATURE_HEADER = "X-Slack-Signature"
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
MAX_SKEW_SECS = 300
"""How far a request's timestamp may be from our clock, as Slack recommends."""
MAX_TEXT_CHARS = 4000
MAX_DOCUMENT_BYTES = 100 * 1000 * 1000
"""The largest export sent as a file (Slack takes up to 1 GB; a chat is no place for more)."""
MAX_CHALLENGE_CHARS = 256
_ENTITY = re.compile(r"&(amp|lt|gt);")
_DECODED = {"amp": "&", "lt": "<", "gt": ">"}
TRANSIENT_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
"""``ok: false`` errors that a later try may get past; any other error is final."""


class SlackPlatform:
    """The Slack Events API: signed events, url_verification, chat.postMessage."""

    def __init__(
        self,
        settings: SlackSettings,
        *,
        signing_secret: str | None,
        bot_token: str,
        app_token: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        if settings.mode == "webhook" or signing_secret:
            signing_secret = require_secret(
                signing_secret or "", settings.signing_secret_env, "Slack signing secret"
            )
        if settings.mode == "socket" or app_token:
            app_token = require_secret(app_token or "", settings.app_token_env, "Slack app token")
        self._signing_secret = signing_secret or None
        self._app_token = app_token or None
        # The replay guard's key: the signing secret, or (Socket Mode without one) the
        # app token, which is what makes an event on the socket authentic.
        self._seen_secret = signing_secret or app_token or ""
        bot_token = require_secret(bot_token, settings.bot_token_env, "Slack bot token")
        self._auth = {"Authorization": f"Bearer {bot_token}"}
        self._clock = clock
        self._allowed = frozenset(settings.allowed_senders)
        self._api = ReplyApi("Slack chat.postMessage", secrets=(bot_token,))
        self._ask = ReplyApi("Slack files.getUploadURLExternal", secrets=(bot_token,))
        self._upload = ReplyApi("Slack file upload", secrets=(bot_token,))
        self._complete = ReplyApi("Slack files.completeUploadExternal", secrets=(bot_token,))

    @classmethod
    def from_settings(
        cls, settings: SlackSettings, *, clock: Callable[[], float] = time.time
    ) -> SlackPlatform:
        """Build from config; each secret comes from the env var the config names.

        Webhook mode needs the signing secret, socket mode the app-level token.
        """
        key = "channels.webhook.slack"
        signing_secret = app_token = None
        if settings.mode == "webhook":
            signing_secret = secret_from_env(
                settings.signing_secret_env, f"{key}.signing_secret_env"
            )
        else:
            app_token = secret_from_env(settings.app_token_env, f"{key}.app_token_env")
        return cls(
            settings,
            signing_secret=signing_secret,
            bot_token=secret_from_env(settings.bot_token_env, f"{key}.bot_token_env"),
            app_token=app_token,
            clock=clock,
        )

    @property
    def settings(self) -> SlackSettings:
        """The platform's config section."""
        return self._settings

    def socket_opener(self) -> tuple[str, dict[str, str], ReplyApi]:
        """What opens a Socket Mode connection: the URL of ``apps.connections.open``, its
        headers (the app-level token) and a client that scrubs that token from errors."""
        if self._app_token is None:
            raise RuntimeError("Socket Mode needs the app-level token")
        url = f"{self._settings.api_base_url.rstrip('/')}/apps.connections.open"
        auth = {"Authorization": f"Bearer {self._app_token}"}
        return url, auth, ReplyApi("Slack apps.connections.open", secrets=(self._app_token,))

    @property
    def name(self) -> str:
        """Always ``slack``."""
        return "slack"

    @property
    def allowed_senders(self) -> frozenset[str]:
        """``team:user`` ids allowed to chat; empty means everyone in the workspace."""
        return self._allowed

    @property
    def max_text_chars(self) -> int:
        """What Slack recommends for one message."""
        return MAX_TEXT_CHARS

    @property
    def max_document_bytes(self) -> int:
        """The largest export uploaded (:data:`MAX_DOCUMENT_BYTES`)."""
        return MAX_DOCUMENT_BYTES

    async def handshake(self, request: web.Request, body: bytes) -> web.Response | None:
        """Answer a signed ``url_verification`` with its challenge.

        The core asks before it checks the signature, so the signature is checked
        here first, before a byte of the body is parsed: an unsigned challenge must not
        prove our URL to anyone, and an unsigned body gets no parser's attention. A
        request that fails the check is not a handshake; the core's own check refuses
        it (and counts it).
        """
        if request.method != "POST":
            return None
        try:
            self.verify(request, body)
            data = load_object(body)
        except WebhookError:
            return None  # not a handshake; verify and parse refuse it
        if data.get("type") != "url_verification":
            return None
        challenge = data.get("challenge")
        if not isinstance(challenge, str) or not 0 < len(challenge) <= MAX_CHALLENGE_CHARS:
            raise WebhookError(400, "missing or oversized challenge")
        return web.Response(text=challenge, content_type="text/plain")

    def verify(self, request: web.Request, body: bytes) -> None:
        """Check the timestamp window, then the v0 signature, in constant time."""
        stamp = request.headers.get(TIMESTAMP_HEADER, "").strip()
        given = request.headers.get(SIGNATURE_HEADER)
        if self._signing_secret is None:
            raise WebhookError(401, "webhooks are off: events come over Socket Mode")
        if not stamp or not given:
            raise WebhookError(401, "missing signature or timestamp")
        check_timestamp(stamp, self._clock(), MAX_SKEW_SECS)
        # The exact header string is signed, so it is used as sent, not re-rendered.
        base = b"v0:" + stamp.encode() + b":" + body
        if not same(given.strip(), "v0=" + hmac_sha256_hex(self._signing_secret, base)):
            raise WebhookError(401, "invalid signature")

    def seen_key(self, message_id: str) -> bytes:
        """The replay-guard key of an event id, keyed with the signing secret (the app
        token in Socket Mode without one)."""
        return seen_key(self._seen_secret, self.name, message_id)

    def parse(self, body: bytes) -> list[PlatformMessage]:
        """The one chat message of a verified event callback, or nothing."""
        data = load_object(body)
        kind = required(data, "type", str, "body")
        if kind != "event_callback":
            return []  # url_verification (answered by handshake), app_rate_limited, ...
        team = safe_name(required(data, "team_id", str, "body"), "team_id")
        event_id = message_id(required(data, "event_id", str, "body"), "event_id")
        event = required(data, "event", dict, "body")
        if event.get("type") != "message" or "subtype" in event or "bot_id" in event:
            return []
        user = optional(event, "user", str, "event")
        text = optional(event, "text", str, "event")
        if not user or text is None or not text.strip():
            return []
        user = safe_name(user, "event.user")
        channel = safe_name(required(event, "channel", str, "event"), "event.channel")
        reply_to: dict[str, Any] = {"channel": channel}
        thread = optional(event, "thread_ts", str, "event")
        if thread:
            reply_to["thread_ts"] = thread
        return [
            PlatformMessage(
                message_id=event_id,
                user_id=f"slack:{team}:{user}",
                chat_id=channel,
                sender=f"{team}:{user}",
                text=unescape(text),
                reply_to=reply_to,
            )
        ]

    async def send(
        self, session: aiohttp.ClientSession, reply_to: dict[str, Any], text: str
    ) -> None:
        """Post ``text`` to the channel (thread), as several messages if it is long.

        Slack reports most failures as HTTP 200 with ``{"ok": false, "error"}``.
        Replies are queued cut to :attr:`max_text_chars` already, so each part is sent
        and retried on its own; this only splits a reply queued whole by an older version.
        """
        channel = _channel(reply_to)
        # Cut before escaping, so no entity is cut in two; an escaped part may pass the
        # recommended 4000 characters, far below the 40000 where Slack truncates.
        for part in split_text(text, MAX_TEXT_CHARS):
            payload = {"channel": channel, "text": escape(part)}
            if reply_to.get("thread_ts"):
                payload["thread_ts"] = str(reply_to["thread_ts"])
            answer = await self._api.post(
                session, self._url("chat.postMessage"), payload, self._auth
            )
            _check(self._api, answer)

    async def send_document(
        self, session: aiohttp.ClientSession, reply_to: dict[str, Any], document: Document
    ) -> None:
        """Upload the file and share it in the channel (thread) with its caption.

        The bot token goes to the Web API only, never to the upload URL an answer named.
        Each attempt starts over: a file that was uploaded but not completed is never
        shared, and Slack discards it.
        """
        channel = _channel(reply_to)
        ask, upload, complete = self._ask, self._upload, self._complete
        with open_document(document, MAX_DOCUMENT_BYTES, ask) as file:
            size = {"filename": document.filename, "length": str(document.size)}
            answer = await ask.post_data(
                session, self._url("files.getUploadURLExternal"), size, self._auth
            )
            _check(ask, answer)
            target, file_id = answer.field("upload_url"), answer.field("file_id")
            if not isinstance(target, str) or http_url_problem(target) is not None:
                raise ask.error(f"{ask.service}: no usable upload_url in the answer", retry=True)
            if not isinstance(file_id, str) or not file_id:
                raise ask.error(f"{ask.service}: no file_id in the answer", retry=True)
            octets = {"Content-Type": "application/octet-stream"}
            sent = await upload.post_data(session, target, file, octets, deadline=UPLOAD_TIMEOUT)
            if not sent.ok:
                raise upload.failure(sent)
        share: dict[str, Any] = {
            "files": [{"id": file_id, "title": document.filename}],
            "channel_id": channel,
        }
        if document.caption.strip():
            share["initial_comment"] = escape(document.caption)
        if reply_to.get("thread_ts"):
            share["thread_ts"] = str(reply_to["thread_ts"])
        answer = await complete.post(
            session, self._url("files.completeUploadExternal"), share, self._auth
        )
        _check(complete, answer)

    def _url(self, method: str) -> str:
        return f"{self._settings.api_base_url.rstrip('/')}/{method}"


def _channel(reply_to: dict[str, Any]) -> str:
    channel = reply_to.get("channel")
    if not isinstance(channel, str) or not channel:
        raise DeliveryError("Slack reply without a channel", retry=False)
    return channel


def _check(api: ReplyApi, answer: ApiAnswer) -> None:
    """Return if a Web API call succeeded, else raise its DeliveryError: Slack reports
    most failures as HTTP 200 with ``{"ok": false, "error"}``."""
    if not answer.ok:
        raise api.failure(answer, answer.field("error"))
    if answer.field("ok") is not True:
        error = answer.field("error")
        error = error[:100] if isinstance(error, str) and error else "no ok in the answer"
        retry = error in TRANSIENT_ERRORS
        raise api.error(
            f"{api.service} failed: {error}",
            retry=retry,
            retry_after=answer.retry_after if retry else None,
        )


def unescape(text: str) -> str:
    """Slack's message text as typed: ``&amp;``, ``&lt;``, ``&gt;`` decoded, in one pass.

    Slack escapes these three characters in the text it sends, because ``<`` and
    ``>`` mark its own syntax (``<@U123>``, ``<!channel>``, ``<https://...|label>``),
    which stays as it is. One pass: ``&amp;lt;`` is the typed ``&lt;``, not ``<``.
    """
    return _ENTITY.sub(lambda m: _DECODED[m.group(1)], text)


def escape(text: str) -> str:
    """``text`` with ``&``, ``<`` and ``>`` escaped, as Slack asks of the text we post.

    So a reply shows exactly what the model wrote and can never form Slack syntax: a
    model that writes ``<!channel>`` must not notify a whole channel.
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
