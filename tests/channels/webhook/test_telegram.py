"""Telegram Bot API: secret token, Update parsing, sendMessage replies, end to end."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import traceback
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request

from picobot.channels.webhook.base import DeliveryError, WebhookError
from picobot.channels.webhook.common import ApiAnswer
from picobot.channels.webhook.platforms.telegram import TelegramPlatform, retry_after
from picobot.config.channels import TelegramSettings, WebhookSettings
from picobot.errors import ConfigError
from picobot.runtime import Runtime
from tests.channels.webhook.conftest import PlatformAPI, Webhooks

SECRET_TOKEN = "tg-secret_token-123"
BOT_TOKEN = "123456:ABC-DEF1234ghIkl-zyx57W2v1u123ew11"
USER = 777000111
CHAT = -1001234567890


def platform(base_url: str = "http://127.0.0.1:1", **overrides: Any) -> TelegramPlatform:
    settings = TelegramSettings(enabled=True, api_base_url=base_url, **overrides)
    return TelegramPlatform(settings, secret_token=SECRET_TOKEN, bot_token=BOT_TOKEN)


def update(
    text: str | None,
    message_id: int = 10,
    *,
    user: int = USER,
    chat: int = CHAT,
    update_id: int = 900,
    is_bot: bool = False,
    kind: str = "message",
    sent: float | None = None,
) -> dict[str, Any]:
    """An Update with one message as Telegram sends it, sent now unless ``sent`` says when."""
    message: dict[str, Any] = {
        "message_id": message_id,
        "from": {"id": user, "is_bot": is_bot, "first_name": "Ann", "language_code": "en"},
        "chat": {"id": chat, "type": "supergroup", "title": "Team"},
        "date": int(time.time() if sent is None else sent),
    }
    if text is not None:
        message["text"] = text
    return {"update_id": update_id, kind: message}


def encode(payload: dict[str, Any] | bytes) -> bytes:
    return payload if isinstance(payload, bytes) else json.dumps(payload).encode()


def request(token: str | None) -> Any:
    headers = {} if token is None else {"X-Telegram-Bot-Api-Secret-Token": token}
    return make_mocked_request("POST", "/webhooks/telegram", headers=headers)


# Configuration -------------------------------------------------------------------


def test_from_settings_names_the_missing_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = TelegramSettings(enabled=True)
    monkeypatch.setenv(settings.secret_token_env, SECRET_TOKEN)
    monkeypatch.delenv(settings.bot_token_env, raising=False)
    with pytest.raises(ConfigError) as info:
        TelegramPlatform.from_settings(settings)
    assert settings.bot_token_env in str(info.value)
    assert BOT_TOKEN not in str(info.value)
    monkeypatch.setenv(settings.bot_token_env, BOT_TOKEN)
    tg = TelegramPlatform.from_settings(settings)
    tg.verify(request(SECRET_TOKEN), b"{}")


def test_secret_token_must_be_one_telegram_accepts() -> None:
    with pytest.raises(ConfigError, match="PICOBOT_TELEGRAM_SECRET_TOKEN"):
        TelegramPlatform(TelegramSettings(), secret_token="has spaces", bot_token=BOT_TOKEN)
    with pytest.raises(ConfigError, match="PICOBOT_TELEGRAM_BOT_TOKEN"):
        TelegramPlatform(TelegramSettings(), secret_token=SECRET_TOKEN, bot_token="")


# Verification and parsing -------------------------------------------------------------


async def test_verify_wants_the_exact_secret_token_and_there_is_no_handshake() -> None:
    tg = platform()
    tg.verify(request(SECRET_TOKEN), b"{}")
    for token in (None, "", SECRET_TOKEN + "x", SECRET_TOKEN[:-1], "ünïcödé"):
        with pytest.raises(WebhookError) as info:
            tg.verify(request(token), b"{}")
        assert info.value.status == 401, token
    assert await tg.handshake(request(SECRET_TOKEN), encode(update("hi"))) is None


def test_parse_text_message_builds_ids_from_the_sender() -> None:
    (msg,) = platform().parse(encode(update("hello", 42)))
    assert msg.message_id == f"{CHAT}:42"
    assert msg.user_id == f"telegram:{USER}"
    assert (msg.chat_id, msg.sender, msg.text) == (str(CHAT), str(USER), "hello")
    assert msg.reply_to == {"chat_id": CHAT}


def test_parse_keeps_the_forum_topic_for_the_reply() -> None:
    payload = update("in a topic")
    payload["message"] |= {"is_topic_message": True, "message_thread_id": 5}
    (msg,) = platform().parse(encode(payload))
    assert msg.reply_to == {"chat_id": CHAT, "message_thread_id": 5}


def test_parse_skips_what_is_not_a_persons_new_text_message() -> None:
    tg = platform()
    assert tg.parse(encode(update("edited", kind="edited_message"))) == []
    assert tg.parse(encode(update("post", kind="channel_post"))) == []
    assert tg.parse(encode(update(None))) == []  # a photo or sticker: no text
    assert tg.parse(encode(update("   "))) == []
    assert tg.parse(encode(update("I am a bot", is_bot=True))) == []
    no_sender = update("anonymous")
    del no_sender["message"]["from"]
    assert tg.parse(encode(no_sender)) == []
    callback = {"update_id": 1, "callback_query": {"id": "1", "from": {"id": USER}}}
    assert tg.parse(encode(callback)) == []


def test_parse_makes_telegrams_command_forms_the_kernels() -> None:
    def parsed(text: str, **overrides: Any) -> list[str]:
        return [m.text for m in platform(**overrides).parse(encode(update(text)))]

    assert parsed("/start") == ["/help"]
    assert parsed("/start deep-link-payload") == ["/help deep-link-payload"]
    assert parsed("/new@AnyBot") == ["/new"]
    assert parsed("/resume@AnyBot abc123") == ["/resume abc123"]
    assert parsed("hi @AnyBot /new@AnyBot") == ["hi @AnyBot /new@AnyBot"]  # not a command
    assert parsed("/new@AnyBot!") == ["/new@AnyBot!"]  # the kernel says it is unknown
    named = {"bot_username": "PicoBot"}
    assert parsed("/new@picobot", **named) == ["/new"]  # usernames ignore case
    assert parsed("/start@PicoBot", **named) == ["/help"]
    assert parsed("/new@OtherBot", **named) == []  # for another bot in the group
    assert parsed("/new", **named) == ["/new"]


def with_message(**fields: Any) -> bytes:
    payload = update("hi")
    payload["message"] |= fields
    return encode(payload)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        encode({"message": {"text": "no update id"}}),
        encode({"update_id": "1", "message": {}}),
        encode({"update_id": True, "message": {}}),
        encode({"update_id": 1, "message": "text"}),
        with_message(text=5),
        with_message(chat={"id": "not a number"}),
        with_message(message_id=None),
        with_message(**{"from": {"id": "77", "is_bot": False}}),
        # Absurd numbers: out of range, not an overflow further down.
        with_message(date=10**400),
        with_message(date=-(2**63)),
        with_message(message_id=2**63),
        with_message(chat={"id": -(2**64)}),
        encode({"update_id": 2**63, "message": {}}),
        encode({"update_id": 10**30}),
        with_message(date=1).replace(b'"date": 1', b'"date": 1' + b"0" * 5000),
    ],
)
def test_malformed_bodies_are_400(body: bytes) -> None:
    with pytest.raises(WebhookError) as info:
        platform().parse(body)
    assert info.value.status == 400


# Sending ------------------------------------------------------------------------


async def test_send_posts_to_send_message_with_the_bot_token_in_the_path(
    platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    tg = platform(platform_api.url(""))
    await tg.send(client, {"chat_id": CHAT, "message_thread_id": 5}, "Hi there")
    (req,) = platform_api.requests
    assert (req.method, req.path) == ("POST", f"/bot{BOT_TOKEN}/sendMessage")
    assert req.json() == {"chat_id": CHAT, "text": "Hi there", "message_thread_id": 5}


async def test_long_reply_is_split_in_utf16_units(
    platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    tg = platform(platform_api.url(""))
    # Each emoji is 2 UTF-16 units: 3000 of them do not fit one 4096-unit message.
    text = "😀" * 3000
    await tg.send(client, {"chat_id": CHAT}, text)
    parts = [r.json()["text"] for r in platform_api.requests]
    assert len(parts) == 2
    assert all(len(p.encode("utf-16-le")) // 2 <= 4096 for p in parts)
    assert "".join(parts) == text


async def test_send_failures_are_classified_and_never_show_the_token(
    platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    tg = platform(platform_api.url(""))
    too_many = {
        "ok": False,
        "error_code": 429,
        "description": "Too Many Requests: retry after 17",
        "parameters": {"retry_after": 17},
    }
    platform_api.reply(429, too_many)
    with pytest.raises(DeliveryError) as info:
        await tg.send(client, {"chat_id": CHAT}, "x")
    assert (info.value.retry, info.value.retry_after_secs) == (True, 17.0)
    platform_api.reply(502, {"ok": False, "error_code": 502, "description": "Bad Gateway"})
    with pytest.raises(DeliveryError) as info:
        await tg.send(client, {"chat_id": CHAT}, "x")
    assert info.value.retry is True
    chat_not_found = {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"}
    platform_api.reply(400, chat_not_found)
    with pytest.raises(DeliveryError) as info:
        await tg.send(client, {"chat_id": CHAT}, "x")
    assert info.value.retry is False and "chat not found" in str(info.value)
    errors = [info.value]
    # An API that echoes the token, an unreachable one, a broken base URL (config refuses
    # it now; built past the check, it must still not leak the token).
    broken = TelegramSettings.model_construct(enabled=True, api_base_url="http://[broken")
    platform_api.reply(401, {"ok": False, "description": f"Unauthorized bot{BOT_TOKEN}"})
    for tg_, expect_retry in (
        (tg, False),
        (platform("http://127.0.0.1:1"), True),
        (TelegramPlatform(broken, secret_token=SECRET_TOKEN, bot_token=BOT_TOKEN), False),
    ):
        with pytest.raises(DeliveryError) as info:
            await tg_.send(client, {"chat_id": CHAT}, "x")
        assert info.value.retry is expect_retry
        errors.append(info.value)
    for error in errors:
        # Not in the text, nor in a chained exception a traceback would print.
        assert BOT_TOKEN not in "".join(traceback.format_exception(error))


# End to end ---------------------------------------------------------------------


async def post(
    client: aiohttp.ClientSession,
    url: str,
    payload: dict[str, Any] | bytes,
    *,
    token: str | None = SECRET_TOKEN,
) -> int:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = token
    async with client.post(url, data=encode(payload), headers=headers) as resp:
        return resp.status


async def user_ids(runtime: Runtime) -> list[str]:
    return [str(r[0]) for r in await runtime.db.fetchall("SELECT user_id FROM sessions", ())]


async def test_update_is_acknowledged_then_answered_once(
    webhooks: Webhooks, platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    bot = await webhooks.start(platform(platform_api.url("")), run_workers=False)
    assert await post(client, bot.url("telegram"), update("hello")) == 200
    assert await bot.store.inbox_depth() == 1 and platform_api.requests == []
    await bot.server.start()
    await bot.server.wait_for(lambda s: s.delivered == 1)
    (req,) = platform_api.requests
    assert req.path == f"/bot{BOT_TOKEN}/sendMessage"
    assert req.json() == {"chat_id": CHAT, "text": "You said: hello"}


async def test_wrong_token_spoofing_and_redelivery(
    webhooks: Webhooks,
    platform_api: PlatformAPI,
    client: aiohttp.ClientSession,
    runtime: Runtime,
) -> None:
    bot = await webhooks.start(platform(platform_api.url("")))
    url = bot.url("telegram")
    assert await post(client, url, update("hi", user=1), token=None) == 401
    assert await post(client, url, update("hi", user=1), token="guess") == 401
    assert await bot.store.inbox_depth() == 0
    payload = update("hello", 7)
    # Fields that could be mistaken for the sender: only message.from.id counts.
    payload["user_id"] = "telegram:1"
    payload["message"]["sender_chat"] = {"id": 1, "type": "channel"}
    assert await post(client, url + "?user=telegram:1", payload) == 200
    # Telegram redelivers an unacknowledged update: same update_id, same message.
    assert await post(client, url, payload) == 200
    await bot.server.wait_for(lambda s: s.delivered == 1)
    assert bot.server.stats.duplicates == 1
    assert len(platform_api.requests) == 1
    assert await user_ids(runtime) == [f"telegram:{USER}"]


async def test_start_and_group_commands_are_answered(
    webhooks: Webhooks, platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    bot = await webhooks.start(platform(platform_api.url(""), bot_username="PicoBot"))
    url = bot.url("telegram")
    assert await post(client, url, update("/start", 1, chat=USER)) == 200
    assert await post(client, url, update("/new@PicoBot", 2)) == 200
    assert await post(client, url, update("/new@OtherBot", 3)) == 200
    await bot.server.wait_for(lambda s: s.delivered == 2)
    # Two chats: their replies go out side by side, in either order.
    sent = {r.json()["chat_id"]: r.json()["text"] for r in platform_api.requests}
    assert sent.keys() == {USER, CHAT}
    assert sent[USER].startswith("Commands:\n")
    assert sent[CHAT].startswith("Started a new session")
    assert await bot.store.inbox_depth() == 0 and bot.server.stats.accepted == 2


async def test_allow_list_and_oversize_body(
    webhooks: Webhooks, platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    tg = platform(platform_api.url(""), allowed_senders=[str(USER)])
    bot = await webhooks.start(tg, settings=WebhookSettings(max_body_bytes=1024))
    url = bot.url("telegram")
    assert await post(client, url, update("x" * 2000)) == 413
    assert await post(client, url, update("stranger", user=5)) == 200
    assert await post(client, url, update("friend", 11)) == 200
    await bot.server.wait_for(lambda s: s.delivered == 1)
    assert bot.server.stats.ignored_senders == 1
    assert [r.json()["text"] for r in platform_api.requests] == ["You said: friend"]


async def test_absurd_numbers_are_a_400_with_a_warning_and_no_traceback(
    webhooks: Webhooks,
    platform_api: PlatformAPI,
    client: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bot = await webhooks.start(platform(platform_api.url("")))
    url = bot.url("telegram")
    caplog.set_level(logging.INFO)
    absurd = update("hi")
    absurd["message"]["date"] = 10**400
    assert await post(client, url, absurd) == 400
    huge = encode(update("hi", sent=1)).replace(b'"date": 1', b'"date": 1' + b"0" * 5000)
    assert await post(client, url, huge) == 400
    assert await post(client, url, update("hi", update_id=2**63)) == 400
    assert await bot.store.inbox_depth() == 0
    ours = [r for r in caplog.records if r.name.startswith("picobot")]
    assert [r.levelno for r in ours] == [logging.WARNING] * 3
    assert all(r.exc_info is None for r in ours)
    assert "message.date is out of range" in ours[0].getMessage()


async def test_delivery_failures_leave_the_token_out_of_logs_and_the_queue(
    webhooks: Webhooks,
    platform_api: PlatformAPI,
    client: aiohttp.ClientSession,
    runtime: Runtime,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="picobot")
    bot = await webhooks.start(platform(platform_api.url("")))
    platform_api.reply(500, {"ok": False, "description": f"boom /bot{BOT_TOKEN}/sendMessage"})
    platform_api.reply(403, {"ok": False, "description": f"Forbidden: bot{BOT_TOKEN} blocked"})
    assert await post(client, bot.url("telegram"), update("hello")) == 200
    await bot.server.wait_for(lambda s: s.delivery_failures == 1)
    assert bot.server.stats.delivery_retries == 1
    (error,) = await runtime.db.fetchall("SELECT last_error FROM outbound_queue", ())
    assert "Forbidden" in str(error[0]) and BOT_TOKEN not in str(error[0])
    # Our own logs, tracebacks included (the stand-in's access log is the platform's).
    ours = [logging.Formatter().format(r) for r in caplog.records if r.name.startswith("picobot")]
    assert any("Forbidden" in line for line in ours)
    assert not any(BOT_TOKEN in line for line in ours)


async def test_parts_of_a_long_reply_are_each_sent_once_when_one_is_retried(
    webhooks: Webhooks, platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    # Sending parts back to back is what runs into Telegram's per-chat limit; the
    # retry must go on from the part refused, not repeat the ones the chat has shown.
    bot = await webhooks.start(platform(platform_api.url("")))
    platform_api.reply(200, {"ok": True, "result": {}})
    too_many = {"ok": False, "error_code": 429, "parameters": {"retry_after": 0}}
    platform_api.reply(429, too_many)
    question = "word " * 900  # the echo is two messages long
    assert await post(client, bot.url("telegram"), update(question.strip())) == 200
    # Bounded: before, the reply was one queue item, delivered (once) after 4 requests.
    await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 2), 10)
    texts = [r.json()["text"] for r in platform_api.requests]
    first, refused, second = texts
    assert refused == second and first != second
    assert f"{first} {second}" == f"You said: {question.strip()}"
    assert bot.server.stats.delivery_retries == 1


def test_an_absurd_retry_after_is_read_as_a_day() -> None:
    def asked(wait: object) -> float | None:
        return retry_after(ApiAnswer(429, {"parameters": {"retry_after": wait}}, None))

    assert asked(10**400) == asked(float("inf")) == 86_400.0
    assert asked(3) == 3.0
    assert asked(-1) is None and asked(True) is None and asked("5") is None
