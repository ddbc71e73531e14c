"""The answer to a confirmed ``/purge user`` names nobody once it is out.

A user confirms their purge with "y" on a messaging platform; the purge deletes their
data, and its answer ("Deleted all data of user ...") is queued after it. Before, that
queued reply kept the user id, the chat id (a phone number, a Telegram id) and the
platform's id of the "y" for as long as retention kept sent replies (90 days): the
user's export answered 200 again and the user id was in the database file.

Each test runs the exchange through a real webhook server on loopback (or the Telegram
long-polling stand-in) with the platform's send API stood in, then scans every file
of the data directory for the user's ids and words, as tests/privacy/test_erasure.py
does. So does a purge that comes while the user's ``/export`` document waits to be
sent: the send never happens, and the export file's bytes are gone with the rest.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from picobot.admin.api import AdminAPI, load_admin_keys
from picobot.backoff import Backoff
from picobot.channels.webhook.base import Platform
from picobot.channels.webhook.connections.base import OutboundConnections
from picobot.channels.webhook.connections.slack_socket import SlackSocket
from picobot.channels.webhook.connections.telegram_polling import TelegramPoller
from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.channels.webhook.platforms.telegram import TelegramPlatform
from picobot.config.channels import GenericWebhookSettings, TelegramSettings
from picobot.config.settings import DataSettings, Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.privacy.export import count_user_data
from picobot.runtime import Runtime, open_runtime
from picobot.store.channels.channel_state import ChannelState
from picobot.store.erasure.erase import erase_residue
from picobot.store.erasure.export_files import export_dir
from picobot.store.erasure.purge import PurgeStore
from picobot.store.keys.sealed_files import read_sealed
from picobot.store.task_runs import PURGE_ERASE_TASK_NAME, last_run
from tests.channels.webhook import test_slack as slack
from tests.channels.webhook import test_slack_socket as socket_mode
from tests.channels.webhook import test_telegram as telegram
from tests.channels.webhook import test_whatsapp as whatsapp
from tests.channels.webhook.conftest import (
    FakeClock,
    PlatformAPI,
    Received,
    Running,
    Webhooks,
    rows,
)
from tests.channels.webhook.document_chats import PLATFORMS, document_chat
from tests.channels.webhook.generic_client import SECRET, signed_headers
from tests.channels.webhook.slack_socket_api import slack_socket_api
from tests.channels.webhook.telegram_api import telegram_api
from tests.privacy.test_erasure import new_marker, scan

ADMIN_KEY = "admin-key-last-reply-0123456789"
FAST = Backoff(base_secs=0.01, cap_secs=0.05)
WAIT = 30.0


@dataclass
class Chat:
    """One user of one platform, every id of theirs a marker the scan looks for."""

    platform: Platform
    user_id: str
    ids: list[str]
    """The user's ids as the platform spells them (user, chat, message ids)."""
    request: Callable[[str, int], tuple[bytes, dict[str, str]]]
    """The signed webhook request of the user's ``n``-th message ``text``."""
    text_of: Callable[[Received], str]
    """The reply text of a request to the platform's send API."""


def digits(rng: random.Random, n: int) -> str:
    """``n`` random digits, the first not 0 or 1 (nothing else in the files spells them)."""
    return str(rng.randint(2, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(n - 1))


def generic_chat(api: PlatformAPI, rng: random.Random) -> Chat:
    user, chat = new_marker(rng), new_marker(rng)
    ids = [user, chat]

    def request(text: str, n: int) -> tuple[bytes, dict[str, str]]:
        ids.append(new_marker(rng))
        body = {"user": user, "chat": chat, "text": text, "message_id": ids[-1]}
        raw = json.dumps(body).encode()
        return raw, signed_headers(raw)

    settings = GenericWebhookSettings(enabled=True, callback_url=api.url("/callback"))
    return Chat(
        GenericPlatform(settings, SECRET),
        f"generic:{user}",
        ids,
        request,
        lambda r: r.json()["text"],
    )


def whatsapp_chat(api: PlatformAPI, rng: random.Random) -> Chat:
    phone = digits(rng, 15)
    ids = [phone]

    def request(text: str, n: int) -> tuple[bytes, dict[str, str]]:
        ids.append(f"wamid.{new_marker(rng)}")
        raw = whatsapp.encode(whatsapp.notification(whatsapp.text_message(text, ids[-1], phone)))
        return raw, {"X-Hub-Signature-256": whatsapp.signature(raw)}

    return Chat(
        whatsapp.platform(api.url("")),
        f"whatsapp:{phone}@s.whatsapp.net",
        ids,
        request,
        lambda r: r.json()["text"]["body"],
    )


def telegram_chat(api: PlatformAPI, rng: random.Random) -> Chat:
    user = int(digits(rng, 12))  # a private chat: the chat id is the user id

    def request(text: str, n: int) -> tuple[bytes, dict[str, str]]:
        body = telegram.update(text, 70 + n, user=user, chat=user, update_id=900 + n)
        return telegram.encode(body), {"X-Telegram-Bot-Api-Secret-Token": telegram.SECRET_TOKEN}

    api.success = {"ok": True, "result": {"message_id": 1}}
    return Chat(
        telegram.platform(api.url("")), f"telegram:{user}", [str(user)], request, _telegram_text
    )


def _telegram_text(r: Received) -> str:
    return str(r.json()["text"])


def slack_chat(api: PlatformAPI, rng: random.Random) -> Chat:
    user, channel = f"U{new_marker(rng)}", f"D{new_marker(rng)}"
    ids = [user, channel]

    def request(text: str, n: int) -> tuple[bytes, dict[str, str]]:
        ids.append(f"Ev{new_marker(rng)}")
        raw = slack.encode(slack.event(text, ids[-1], user=user, channel=channel))
        return raw, slack.headers(raw)

    api.success = {"ok": True, "ts": "1.2"}
    return Chat(
        slack.platform(api.url("/api")),
        f"slack:T0001:{user}",
        ids,
        request,
        lambda r: r.json()["text"],
    )


CHATS: dict[str, Callable[[PlatformAPI, random.Random], Chat]] = {
    "generic": generic_chat,
    "whatsapp": whatsapp_chat,
    "telegram": telegram_chat,
    "slack": slack_chat,
}


@pytest.fixture
async def admin(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """The admin API over the same runtime; its base URL."""
    monkeypatch.setenv("PICOBOT_ADMIN_API_KEYS", ADMIN_KEY)
    api = AdminAPI(runtime, load_admin_keys(Settings().server))
    app = web.Application()
    api.add_routes(app)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def export_status(client: aiohttp.ClientSession, admin: str, user_id: str) -> int:
    url = f"{admin}/api/v1/users/{user_id}/export"
    async with client.get(url, headers={"X-API-Key": ADMIN_KEY}) as resp:
        await resp.read()
        return resp.status


async def purge_through(
    bot: Running,
    send: Callable[[str], Awaitable[None]],
    sent: Callable[[], list[str]],
    said: str,
) -> None:
    """Chat, ask for ``/purge user`` and confirm it; the first two replies delivered."""
    await send(f"remember {said} please")
    await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 1), WAIT)
    await send("/purge user")
    await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 2), WAIT)
    assert "y or n" in sent()[1]
    await send("y")


def poster(
    client: aiohttp.ClientSession, bot: Running, chat: Chat
) -> Callable[[str], Awaitable[None]]:
    sent = 0

    async def send(text: str) -> None:
        nonlocal sent
        sent += 1
        body, headers = chat.request(text, sent)
        headers = {"Content-Type": "application/json", **headers}
        async with client.post(bot.url(chat.platform.name), data=body, headers=headers) as resp:
            assert resp.status == 200, await resp.text()

    return send


@pytest.mark.parametrize("outcome", ["delivered", "given up"])
@pytest.mark.parametrize("name", sorted(CHATS))
async def test_the_purge_answer_leaves_no_trace_once_sent_or_given_up(
    name: str,
    outcome: str,
    webhooks: Webhooks,
    runtime: Runtime,
    platform_api: PlatformAPI,
    client: aiohttp.ClientSession,
    admin: str,
) -> None:
    rng = random.Random(f"{name}-{outcome}")
    chat = CHATS[name](platform_api, rng)
    said = new_marker(rng)
    bot = await webhooks.start(chat.platform, max_attempts=3)
    send = poster(client, bot, chat)

    def sent() -> list[str]:
        return [chat.text_of(r) for r in platform_api.requests]

    await purge_through(bot, send, sent, said)
    assert await export_status(client, admin, chat.user_id) == 200
    if outcome == "given up":
        platform_api.fail(3)
        await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivery_failures == 1), WAIT)
    else:
        await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 3), WAIT)
    # The answer reached the platform (or was tried): it names the user, as it should.
    answer = sent()[-1]
    assert answer.startswith("Deleted all data of user") and chat.user_id in answer

    assert await rows(runtime, "SELECT * FROM outbound_queue") == []
    assert await rows(runtime, "SELECT * FROM webhook_inbox") == []
    assert (await count_user_data(runtime.db, chat.user_id)).empty
    assert await export_status(client, admin, chat.user_id) == 404
    # Erased, not just deleted: no checkpoint or VACUUM here beyond the purge's own.
    assert scan(runtime.db.path.parent, [*chat.ids, said]) == {}
    erasure = await last_run(runtime.db, PURGE_ERASE_TASK_NAME)
    assert erasure is not None and erasure.ok and not erasure.unfinished


async def test_while_the_answer_waits_it_keeps_only_what_sending_needs(
    webhooks: Webhooks,
    runtime: Runtime,
    platform_api: PlatformAPI,
    client: aiohttp.ClientSession,
    admin: str,
) -> None:
    rng = random.Random(30)
    chat = generic_chat(platform_api, rng)
    said = new_marker(rng)
    bot = await webhooks.start(chat.platform, backoff_base_secs=3600, backoff_cap_secs=3600)
    send = poster(client, bot, chat)

    def sent() -> list[str]:
        return [chat.text_of(r) for r in platform_api.requests]

    await purge_through(bot, send, sent, said)
    platform_api.fail(1)
    await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivery_retries == 1), WAIT)

    # Queued for a retry in an hour: the chat, the reply target and the text, no user.
    [(user_id, chat_id, target, status)] = await rows(
        runtime, "SELECT user_id, chat_id, reply_to_json, status FROM outbound_queue"
    )
    assert (user_id, status) == ("", "pending")
    assert chat_id == chat.ids[1] and json.loads(str(target))["chat"] == chat.ids[1]
    assert await rows(runtime, "SELECT * FROM webhook_inbox") == []
    assert await export_status(client, admin, chat.user_id) == 404
    # The answer names the user: it waits sealed (with the shared key), readable to send.
    [(stored,)] = await rows(runtime, "SELECT text FROM outbound_queue")
    assert isinstance(stored, bytes) and chat.user_id.encode() not in stored
    [(text,)] = await rows(runtime, "SELECT picobot_open(text) FROM outbound_queue")
    assert str(text).startswith("Deleted all data of user") and chat.user_id in str(text)
    await runtime.db.checkpoint()
    assert scan(runtime.db.path.parent, [said]) == {}


async def test_polled_telegram_purge_answer_leaves_no_trace(tmp_path: Path) -> None:
    rng = random.Random(31)
    user, said = int(digits(rng, 12)), new_marker(rng)
    token = "99:last-reply-polling-token-0123456789"
    settings = Settings(data=DataSettings(dir=str(tmp_path / "data")))
    async with AsyncExitStack() as stack:
        api = await stack.enter_async_context(telegram_api(token))
        rt = await stack.enter_async_context(open_runtime(settings, provider=ScriptedProvider()))
        platform = TelegramPlatform(
            TelegramSettings(
                enabled=True, mode="polling", api_base_url=api.base_url, poll_timeout_secs=1
            ),
            secret_token=None,
            bot_token=token,
        )
        hooks = Webhooks(rt)
        stack.push_async_callback(hooks.stop_all)
        bot = await hooks.start(platform)
        poller = TelegramPoller(platform, bot.server, ChannelState(rt.db), backoff=FAST)
        owner = OutboundConnections([poller], rt.tasks)
        owner.start()
        stack.push_async_callback(owner.stop)
        sent_count = 0

        async def send(text: str) -> None:
            nonlocal sent_count
            sent_count += 1
            api.push(text, user=user, chat=user, message_id=40 + sent_count)

        def sent() -> list[str]:
            return [str(m["text"]) for m in api.sent]

        await purge_through(bot, send, sent, said)
        await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 3), WAIT)
        assert sent()[-1].startswith("Deleted all data of user telegram:")

        assert await rows(rt, "SELECT * FROM outbound_queue") == []
        assert (await count_user_data(rt.db, f"telegram:{user}")).empty
        assert scan(rt.db.path.parent, [str(user), said]) == {}


async def test_slack_socket_mode_purge_answer_leaves_no_trace(
    webhooks: Webhooks, runtime: Runtime
) -> None:
    rng = random.Random(33)
    user, channel, said = f"U{new_marker(rng)}", f"D{new_marker(rng)}", new_marker(rng)
    async with slack_socket_api(socket_mode.APP_TOKEN, socket_mode.BOT_TOKEN) as api:
        platform = socket_mode.socket_platform(api)
        bot = await webhooks.start(platform)
        socket = SlackSocket(platform, bot.server, ChannelState(runtime.db), backoff=FAST)
        owner = OutboundConnections([socket], runtime.tasks)
        owner.start()
        try:
            await asyncio.wait_for(socket.status.wait_for(lambda s: s.connected), WAIT)

            async def send(text: str) -> None:
                await api.send_event(text, user=user, channel=channel)

            def sent() -> list[str]:
                return [str(p["text"]) for p in api.posted]

            await purge_through(bot, send, sent, said)
            await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 3), WAIT)
            assert sent()[-1].startswith(f"Deleted all data of user slack:T0TEAM:{user}")
            assert await rows(runtime, "SELECT * FROM outbound_queue") == []
            assert (await count_user_data(runtime.db, f"slack:T0TEAM:{user}")).empty
            assert scan(runtime.db.path.parent, [user, channel, said]) == {}
        finally:
            await owner.stop()


async def test_a_reply_of_a_user_not_purged_is_kept_as_before(
    webhooks: Webhooks, runtime: Runtime, platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    # Only a purged user's replies go: anyone else's sent reply keeps its row (blanked).
    chat = generic_chat(platform_api, random.Random(32))
    bot = await webhooks.start(chat.platform)
    await poster(client, bot, chat)("hello")
    await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 1), WAIT)
    assert await rows(runtime, "SELECT user_id, text, status FROM outbound_queue") == [
        (chat.user_id, "", "sent")
    ]


@pytest.mark.parametrize("scope", ["user", "session"])
@pytest.mark.parametrize("name", PLATFORMS)
async def test_a_purge_before_an_export_is_delivered_stops_it_and_leaves_no_byte(
    name: str, scope: str, webhooks: Webhooks, runtime: Runtime, client: aiohttp.ClientSession
) -> None:
    rng = random.Random(f"export-{name}-{scope}")
    said = new_marker(rng)
    clock = FakeClock()
    async with document_chat(name) as chat:
        bot = await webhooks.start(
            chat.platform, clock=clock, backoff_base_secs=3600, backoff_cap_secs=3600
        )
        await chat.say(client, bot, "alice", f"my locker code is {said}")
        await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 1), WAIT)
        chat.fail_uploads(1)
        await chat.say(client, bot, "alice", "/export")
        await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivery_retries == 1), WAIT)

        # Waiting an hour for its retry: the queue names the file, the file holds the data
        # (sealed with the user's key).
        [(document, sid)] = await rows(
            runtime, "SELECT document, session_id FROM outbound_queue WHERE status = 'pending'"
        )
        path = export_dir(runtime.db.path.parent) / str(document)
        assert said.encode() in read_sealed(path, runtime.db.sealer)
        assert said not in str(document)  # a name, never the content

        purges = PurgeStore(runtime.db)
        if scope == "user":
            await purges.delete_user(chat.user_ids["alice"])
        else:
            await purges.delete_session(str(sid))
        await erase_residue(runtime.db)
        assert not path.exists()
        assert await rows(runtime, "SELECT * FROM outbound_queue WHERE status = 'pending'") == []
        assert scan(runtime.db.path.parent, [said]) == {}

        # The retry comes due: nothing is left to send. Bob's answer going out shows the
        # worker looked since.
        clock.advance(7200)
        bot.server.wake()
        await chat.say(client, bot, "bob", "hello")
        await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 2), WAIT)
        assert chat.received() == []
        assert bot.server.stats.delivery_failures == 0
        await runtime.db.checkpoint()
        assert scan(runtime.db.path.parent, [said]) == {}
