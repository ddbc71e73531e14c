"""Hostile JSON: nested too deeply to decode, in a request or in a platform's answer.

The decoder gives up on ``[[[[...`` with a RecursionError. Before any signature it must
not be parsed at all; after one it is a malformed body (400, a warning), and in a
platform's answer it is an answer without a body: never an error with a traceback.
"""

from __future__ import annotations

import logging
import time

import aiohttp
import pytest

from picobot.channels.webhook.base import DeliveryError, Platform, WebhookError
from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.channels.webhook.platforms.slack import SlackPlatform
from picobot.channels.webhook.platforms.telegram import TelegramPlatform
from picobot.channels.webhook.platforms.whatsapp import WhatsAppPlatform
from picobot.channels.webhook.signing import hmac_sha256_hex
from picobot.config.channels import (
    GenericWebhookSettings,
    SlackSettings,
    TelegramSettings,
    WhatsAppSettings,
)
from tests.channels.webhook.conftest import SECRET, PlatformAPI, Webhooks
from tests.channels.webhook.generic_client import signed_headers

DEEP = b"[" * 100_000
DEEP_OBJECT = b'{"a":' * 100_000
SLACK_SECRET = "slack-signing-secret-for-tests"


def platforms(api_url: str) -> list[Platform]:
    """Every platform, replying to ``api_url``."""
    return [
        GenericPlatform(GenericWebhookSettings(enabled=True, callback_url=api_url), SECRET),
        SlackPlatform(
            SlackSettings(enabled=True, api_base_url=api_url),
            signing_secret=SLACK_SECRET,
            bot_token="xoxb-test-token",
        ),
        TelegramPlatform(
            TelegramSettings(enabled=True, api_base_url=api_url),
            secret_token="tg-secret",
            bot_token="1:tg-bot-token",
        ),
        WhatsAppPlatform(
            WhatsAppSettings(enabled=True, graph_base_url=api_url, phone_number_id="1"),
            verify_token="wa-verify",
            app_secret="wa-app-secret",
            access_token="wa-access-token",
        ),
    ]


def slack_headers(body: bytes) -> dict[str, str]:
    stamp = str(int(time.time()))
    signed = hmac_sha256_hex(SLACK_SECRET, f"v0:{stamp}:".encode() + body)
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": "v0=" + signed}


@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECT])
def test_every_platform_parses_deep_nesting_as_malformed(body: bytes) -> None:
    for platform in platforms("http://127.0.0.1:9"):
        with pytest.raises(WebhookError) as info:
            platform.parse(body)
        assert (info.value.status, info.value.reason) == (400, "body is not valid JSON")


async def test_deep_nesting_is_refused_without_an_error_in_the_log(
    webhooks: Webhooks,
    platform_api: PlatformAPI,
    client: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="picobot")
    generic, slack, *_ = platforms(platform_api.url(""))
    bot = await webhooks.start(generic, slack)

    async def post(platform: str, headers: dict[str, str]) -> int:
        async with client.post(bot.url(platform), data=DEEP, headers=headers) as resp:
            return resp.status

    # Unsigned: refused by the signature check, before anything parses the body.
    assert await post("slack", {}) == 401
    assert await post("generic", {}) == 401
    # Signed, so parsed: a malformed body.
    assert await post("slack", slack_headers(DEEP)) == 400
    assert await post("generic", signed_headers(DEEP)) == 400
    assert bot.server.stats.rejected_signature == 2
    assert await bot.store.inbox_depth() == 0
    assert [r.levelname for r in caplog.records if r.levelno >= logging.ERROR] == []
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refusals == [
        "slack webhook refused (401): missing signature or timestamp",
        "generic webhook refused (401): missing signature",
        "slack webhook refused (400): body is not valid JSON",
        "generic webhook refused (400): body is not valid JSON",
    ]


async def test_a_deeply_nested_answer_of_a_platform_is_an_answer_without_a_body(
    platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    _, slack, telegram, _ = platforms(platform_api.url(""))
    platform_api.reply(200, DEEP)
    platform_api.reply(503, DEEP_OBJECT)
    with pytest.raises(DeliveryError) as info:
        await slack.send(client, {"channel": "C1"}, "hi")
    assert (str(info.value), info.value.retry) == (
        "Slack chat.postMessage failed: no ok in the answer",
        False,
    )
    with pytest.raises(DeliveryError) as info:
        await telegram.send(client, {"chat_id": 1}, "hi")
    assert (str(info.value), info.value.retry) == ("Telegram sendMessage answered HTTP 503", True)
