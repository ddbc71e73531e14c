"""Telegram Bot API webhook (``/webhooks/telegram``).

Set the webhook with ``setWebhook(url=.../webhooks/telegram, secret_token=<yours>)``;
Telegram then sends every Update as a JSON ``POST`` with the header
``X-Telegram-Bot-Api-Secret-Token: <yours>``, which is all there is to check: Telegram
does not sign bodies, so whoever holds the secret token can speak as any Telegram
user to this bot. Keep it secret and long. The message's ``date`` comes with the same
token: the core drops a message older than ``max_message_age_secs`` (Telegram keeps
an unacknowledged update for 24 hours), so a captured request cannot be replayed for
ever. (``update_id`` is no replay guard: after a quiet week it restarts at random.)

Only new ``message`` updates with ``text`` from a person are chat messages; edits,
channel posts, callbacks, media without text and messages from bots are skipped.
The user id is ``telegram:<from.id>``, the chat id ``<chat.id>`` (a private chat,
group or supergroup), and the message id ``<chat.id>:<message_id>``: Telegram
redelivers an unacknowledged update with the same message, and unlike ``update_id``
(which restarts at a random value after a quiet week) it never repeats for another
message. Commands come as Telegram writes them and are made the kernel's: ``/start``
(the first message of every private chat) is ``/help``, and the ``@BotUsername`` that
groups append is dropped (a command for another bot is skipped when ``bot_username``
is set). Replies go to ``POST {api_base_url}/bot<token>/sendMessage``, 4096
characters per message (longer replies are sent as several messages, in order); a
document (``/export``) goes to ``sendDocument`` as multipart/form-data, a file of at
most 50 MB with a caption of at most 1024 characters. The bot token is part of those
URLs, so it is scrubbed from every delivery error.
"""

from __future__ import annotations

import re
from typing import Any

import aiohttp
from aiohttp import web

from picobot.backoff import RETRY_AFTER_CEILING_SECS
from picobot.channels.webhook.base import DeliveryError, Document, PlatformMessage, WebhookError
from picobot.channels.webhook.common import (
    ApiAnswer,
    ReplyApi,
    load_object,
    optional,
    required,
    split_text,
)
from picobot.channels.webhook.documents import (
    JSONL_TYPE,
    UPLOAD_TIMEOUT,
    caption,
    open_document,
)
from picobot.channels.webhook.signing import require_secret, same, secret_from_env, seen_key
from picobot.config.channels import TelegramSettings
from picobot.errors import ConfigError

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"  # noqa: S105 - a header name
MAX_TEXT_CHARS = 4096
"""Longest text of one sendMessage (Telegram counts UTF-16 code units)."""
MAX_DOCUMENT_BYTES = 50 * 1000 * 1000
"""The largest file a bot may send with sendDocument ("up to 50 MB")."""
MAX_CAPTION_CHARS = 1024
"""Longest caption of a document."""
_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")
"""What setWebhook accepts as secret_token."""
_COMMAND = re.compile(r"/([A-Za-z0-9_]+)(?:@([A-Za-z0-9_]+))?(?=\s|$)")
"""A command as Telegram writes it: ``/name``, or ``/name@BotUsername`` in groups."""


class TelegramPlatform:
    """The Telegram Bot API: secret-token webhooks, sendMessage replies."""

    def __init__(
        self, settings: TelegramSettings, *, secret_token: str | None, bot_token: str
    ) -> None:
        bot_token = require_secret(bot_token, settings.bot_token_env, "Telegram bot token")
        if settings.mode == "webhook" or secret_token:
            secret_token = require_secret(
                secret_token or "", settings.secret_token_env, "Telegram secret token"
            )
            if not _SECRET_TOKEN.fullmatch(secret_token):
                # Telegram would refuse it in setWebhook, so no webhook could ever pass.
                raise ConfigError(
                    f"the Telegram secret token ({settings.secret_token_env}) must be 1-256 "
                    "characters of A-Z, a-z, 0-9, _ and -"
                )
        self._settings = settings
        self._secret_token = secret_token or None
        # The replay guard's key: the webhook's secret, or (polling without one) the
        # bot token, which is what makes a polled update authentic.
        self._seen_secret = secret_token or bot_token
        self._bot_token = bot_token
        self._base = f"{settings.api_base_url.rstrip('/')}/bot{bot_token}"
        self._send_url = f"{self._base}/sendMessage"
        self._allowed = frozenset(settings.allowed_senders)
        self._username = settings.bot_username.lower()  # Telegram ignores its case
        self._api = ReplyApi("Telegram sendMessage", secrets=(bot_token,))
        self._document_url, self._document_api = self.method("sendDocument")

    @classmethod
    def from_settings(cls, settings: TelegramSettings) -> TelegramPlatform:
        """Build from config; each secret comes from the env var the config names.

        In polling mode the secret token is not needed (there is no webhook to check).
        """
        key = "channels.webhook.telegram"
        secret_token = None
        if settings.mode == "webhook":
            secret_token = secret_from_env(settings.secret_token_env, f"{key}.secret_token_env")
        return cls(
            settings,
            secret_token=secret_token,
            bot_token=secret_from_env(settings.bot_token_env, f"{key}.bot_token_env"),
        )

    @property
    def settings(self) -> TelegramSettings:
        """The platform's config section."""
        return self._settings

    def method(self, name: str) -> tuple[str, ReplyApi]:
        """The URL of Bot API method ``name`` and a client that scrubs the bot token
        (part of the URL) from every error text."""
        return f"{self._base}/{name}", ReplyApi(f"Telegram {name}", secrets=(self._bot_token,))

    @property
    def name(self) -> str:
        """Always ``telegram``."""
        return "telegram"

    @property
    def allowed_senders(self) -> frozenset[str]:
        """Telegram user ids allowed to chat; empty means everyone."""
        return self._allowed

    @property
    def max_text_chars(self) -> int:
        """Telegram's limit of one sendMessage, in UTF-16 units."""
        return MAX_TEXT_CHARS

    @property
    def max_document_bytes(self) -> int:
        """What sendDocument takes from a bot."""
        return MAX_DOCUMENT_BYTES

    async def handshake(self, request: web.Request, body: bytes) -> web.Response | None:
        """There is no handshake: setWebhook is a call we make, not one we answer."""
        return None

    def verify(self, request: web.Request, body: bytes) -> None:
        """Check the secret token header in constant time."""
        given = request.headers.get(SECRET_HEADER)
        if self._secret_token is None:
            raise WebhookError(401, "webhooks are off: the bot polls")
        if not given:
            raise WebhookError(401, "missing secret token")
        if not same(given, self._secret_token):
            raise WebhookError(401, "invalid secret token")

    def seen_key(self, message_id: str) -> bytes:
        """The replay-guard key of a message id, keyed with the secret token (the bot
        token when polling without one)."""
        return seen_key(self._seen_secret, self.name, message_id)

    def parse(self, body: bytes) -> list[PlatformMessage]:
        """The one text message of an Update, or nothing."""
        update = load_object(body)
        required(update, "update_id", int, "update")
        msg = optional(update, "message", dict, "update")
        if msg is None:
            return []  # edited_message, channel_post, callback_query, my_chat_member, ...
        text = optional(msg, "text", str, "message")
        sender = optional(msg, "from", dict, "message")
        if text is None or not text.strip() or sender is None or sender.get("is_bot") is True:
            # Media, service messages, other bots, anonymous group admins.
            return []
        user = required(sender, "id", int, "message.from")
        chat = required(required(msg, "chat", dict, "message"), "id", int, "message.chat")
        number = required(msg, "message_id", int, "message")
        sent = required(msg, "date", int, "message")
        text = self._as_command(text)
        if text is None:
            return []  # a command for another bot in the same group
        reply_to: dict[str, Any] = {"chat_id": chat}
        if msg.get("is_topic_message") is True:
            # Without it the reply would land in the forum's General topic.
            reply_to["message_thread_id"] = required(msg, "message_thread_id", int, "message")
        return [
            PlatformMessage(
                message_id=f"{chat}:{number}",
                user_id=f"telegram:{user}",
                chat_id=str(chat),
                sender=str(user),
                text=text,
                reply_to=reply_to,
                sent_at=float(sent),
            )
        ]

    def _as_command(self, text: str) -> str | None:
        """``text`` with a Telegram command made one the kernel knows, or None.

        In groups Telegram appends the bot's username (``/new@PicoBot``): it is dropped
        when it names this bot, or any bot if ``bot_username`` is not configured; a
        command naming another bot is None. ``/start``, the message Telegram sends when
        someone opens a chat with the bot, is ``/help``.
        """
        stripped = text.lstrip()
        match = _COMMAND.match(stripped)
        if match is None:
            return text
        name, bot = match.groups()
        if bot and self._username and bot.lower() != self._username:
            return None
        if name.lower() == "start":
            name = "help"
        return f"/{name}{stripped[match.end() :]}"

    async def send(
        self, session: aiohttp.ClientSession, reply_to: dict[str, Any], text: str
    ) -> None:
        """Send ``text`` to the chat, as several messages if it is long.

        Replies are queued cut to :attr:`max_text_chars` already, so each part is sent
        and retried on its own; this only splits a reply queued whole by an older version.
        """
        target = _target(reply_to)
        for part in split_text(text, MAX_TEXT_CHARS):
            answer = await self._api.post(session, self._send_url, {**target, "text": part})
            _check(self._api, answer)

    async def send_document(
        self, session: aiohttp.ClientSession, reply_to: dict[str, Any], document: Document
    ) -> None:
        """``sendDocument`` as multipart/form-data: the chat (and topic), the caption, and
        the file as ``document`` under its file name."""
        target = _target(reply_to)
        api = self._document_api
        with open_document(document, MAX_DOCUMENT_BYTES, api) as file:
            form = aiohttp.FormData()
            for key, value in target.items():
                form.add_field(key, str(value))
            if document.caption.strip():
                form.add_field("caption", caption(document.caption, MAX_CAPTION_CHARS))
            form.add_field("document", file, filename=document.filename, content_type=JSONL_TYPE)
            answer = await api.post_data(session, self._document_url, form, deadline=UPLOAD_TIMEOUT)
        _check(api, answer)


def _target(reply_to: dict[str, Any]) -> dict[str, Any]:
    """The chat (and forum topic) a reply goes to, as Bot API parameters."""
    chat = reply_to.get("chat_id")
    if not isinstance(chat, int | str) or isinstance(chat, bool) or chat == "":
        raise DeliveryError("Telegram reply without a chat_id", retry=False)
    target: dict[str, Any] = {"chat_id": chat}
    if reply_to.get("message_thread_id") is not None:
        target["message_thread_id"] = reply_to["message_thread_id"]
    return target


def _check(api: ReplyApi, answer: ApiAnswer) -> None:
    """Return if the Bot API took the call, else raise its DeliveryError."""
    if not (answer.ok and answer.field("ok") is True):
        raise api.failure(answer, answer.field("description"), retry_after=retry_after(answer))


def retry_after(answer: ApiAnswer) -> float | None:
    """The wait a Bot API error asks for: a 429 says it in its body
    (``parameters.retry_after``), not in a header. At most a day, like a Retry-After
    header (a larger number would overflow a float)."""
    wait = answer.field("parameters", "retry_after")
    if isinstance(wait, int | float) and not isinstance(wait, bool) and wait >= 0:
        return float(min(wait, RETRY_AFTER_CEILING_SECS))
    return None
