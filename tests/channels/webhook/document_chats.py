"""Two users (alice, bob) of one messaging platform, against a stand-in of its API.

What the tests of ``/export`` as a platform document share: :func:`document_chat`
starts the stand-in of Telegram's Bot API, Slack's Web API or WhatsApp's Cloud API on
loopback and builds the platform talking to it; :meth:`DocumentChat.say` posts a
user's signed webhook to a running webhook server; :meth:`DocumentChat.received` lists
the documents the platform took, :meth:`DocumentChat.texts` the text messages.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp

from picobot.channels.webhook.base import Platform
from tests.channels.webhook import test_slack as slack
from tests.channels.webhook import test_telegram as telegram
from tests.channels.webhook import test_whatsapp as whatsapp
from tests.channels.webhook.conftest import Running
from tests.channels.webhook.graph_api import graph_api
from tests.channels.webhook.slack_socket_api import slack_socket_api
from tests.channels.webhook.telegram_api import telegram_api

PLATFORMS = ("telegram", "slack", "whatsapp")
"""The platforms with a file API."""


@dataclass(frozen=True)
class Received:
    """A document as the platform took it."""

    filename: str
    caption: str
    content: bytes

    def records(self) -> list[dict[str, Any]]:
        """The JSON Lines of the file."""
        return [json.loads(line) for line in self.content.decode("utf-8").splitlines()]


@dataclass
class DocumentChat:
    """One platform, its stand-in, and the two users' ids."""

    name: str
    platform: Platform
    user_ids: dict[str, str]
    """``alice`` and ``bob`` as PicoBot user ids."""
    request: Callable[[str, str, int], tuple[bytes, dict[str, str]]]
    """The signed webhook request of user ``who``'s ``n``-th message ``text``."""
    received: Callable[[], list[Received]]
    texts: Callable[[], list[str]]
    fail_uploads: Callable[[int], None]
    """Make the next ``n`` uploads fail with HTTP 500."""
    addressed: Callable[[], list[str]]
    """The chat each document went to, as the platform's API was told."""
    chats: dict[str, str]
    """``alice``'s and ``bob``'s chat ids as the platform spells them."""
    api: Any
    """The stand-in itself, for what only one platform has."""
    sent_count: int = 0

    async def say(self, client: aiohttp.ClientSession, bot: Running, who: str, text: str) -> None:
        """Post ``who``'s message ``text`` to the webhook; it is acknowledged."""
        self.sent_count += 1
        body, headers = self.request(who, text, self.sent_count)
        headers = {"Content-Type": "application/json", **headers}
        async with client.post(bot.url(self.name), data=body, headers=headers) as resp:
            assert resp.status == 200, await resp.text()


@asynccontextmanager
async def document_chat(name: str) -> AsyncIterator[DocumentChat]:
    """The platform ``name`` and its API's stand-in, for as long as the context lasts."""
    if name == "telegram":
        async with _telegram() as chat:
            yield chat
    elif name == "slack":
        async with _slack() as chat:
            yield chat
    else:
        async with _whatsapp() as chat:
            yield chat


@asynccontextmanager
async def _telegram() -> AsyncIterator[DocumentChat]:
    ids = {"alice": 710001, "bob": 710002}  # private chats: the chat id is the user id

    def request(who: str, text: str, n: int) -> tuple[bytes, dict[str, str]]:
        body = telegram.update(text, n, user=ids[who], chat=ids[who], update_id=900 + n)
        return telegram.encode(body), {"X-Telegram-Bot-Api-Secret-Token": telegram.SECRET_TOKEN}

    async with telegram_api(telegram.BOT_TOKEN) as api:
        yield DocumentChat(
            "telegram",
            telegram.platform(api.base_url),
            {who: f"telegram:{n}" for who, n in ids.items()},
            request,
            lambda: [
                Received(u.filename, f.get("caption", ""), u.content) for f, u in api.documents
            ],
            lambda: [str(m["text"]) for m in api.sent],
            lambda n: api.failing_sends.extend([500] * n),
            lambda: [f["chat_id"] for f, _ in api.documents],
            {who: str(n) for who, n in ids.items()},
            api,
        )


@asynccontextmanager
async def _slack() -> AsyncIterator[DocumentChat]:
    ids = {"alice": "U0ALICE", "bob": "U0BOB"}

    def request(who: str, text: str, n: int) -> tuple[bytes, dict[str, str]]:
        event = slack.event(text, f"Ev{n:04d}", user=ids[who], channel=f"D{ids[who]}")
        raw = slack.encode(event)
        return raw, slack.headers(raw)

    async with slack_socket_api("xapp-1-unused", slack.BOT_TOKEN) as api:
        yield DocumentChat(
            "slack",
            slack.platform(api.base_url),
            {who: f"slack:T0001:{u}" for who, u in ids.items()},
            request,
            lambda: [
                Received(f["upload"].filename, s.get("initial_comment", ""), f["upload"].content)
                for s in api.shared
                for f in s["files"]
            ],
            lambda: [str(p["text"]) for p in api.posted],
            lambda n: api.failing_uploads.extend([500] * n),
            lambda: [str(s["channel_id"]) for s in api.shared],
            {who: f"D{u}" for who, u in ids.items()},
            api,
        )


@asynccontextmanager
async def _whatsapp() -> AsyncIterator[DocumentChat]:
    phones = {"alice": "15550001111", "bob": "15550002222"}

    def request(who: str, text: str, n: int) -> tuple[bytes, dict[str, str]]:
        message = whatsapp.text_message(text, f"wamid.in{n}", phones[who])
        raw = whatsapp.encode(whatsapp.notification(message))
        return raw, {"X-Hub-Signature-256": whatsapp.signature(raw)}

    async with graph_api(whatsapp.ACCESS_TOKEN, whatsapp.NUMBER) as api:
        yield DocumentChat(
            "whatsapp",
            whatsapp.platform(api.graph_url),
            {who: f"whatsapp:{p}@s.whatsapp.net" for who, p in phones.items()},
            request,
            lambda: [
                Received(str(d["filename"]), str(d.get("caption", "")), u.content)
                for d, u in api.documents()
            ],
            lambda: [str(m["text"]["body"]) for m in api.messages if m["type"] == "text"],
            lambda n: api.failing_uploads.extend([500] * n),
            lambda: [str(m["to"]) for m in api.messages if m["type"] == "document"],
            dict(phones),
            api,
        )
