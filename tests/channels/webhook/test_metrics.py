"""The webhook core's counters as exported on /metrics (:class:`WebhookMetrics`), moved
by real requests to a real webhook server and a stand-in platform API that fails."""

from __future__ import annotations

import asyncio

import aiohttp

from picobot.channels.webhook.metrics import WebhookMetrics
from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.config.channels import GenericWebhookSettings
from tests.channels.webhook.conftest import PlatformAPI, Running, Webhooks, message, post_generic
from tests.scrape import Samples, sample, scrape

WAIT_SECS = 10.0
"""Long enough for a reply on a loaded machine; a starved one would wait forever."""


def deliveries(samples: Samples) -> dict[str, float]:
    return {
        outcome: sample(samples, "picobot_webhook_deliveries_total", outcome=outcome)
        for outcome in ("sent", "retry", "failed")
    }


def received(samples: Samples) -> dict[str, float]:
    return {
        outcome: sample(samples, "picobot_webhook_messages_total", outcome=outcome)
        for outcome in ("accepted", "duplicate", "ignored_sender")
    }


async def test_every_counter_starts_at_zero(webhooks: Webhooks, generic: GenericPlatform) -> None:
    bot = await webhooks.start(generic)
    samples = scrape(WebhookMetrics(bot.server.stats))
    assert deliveries(samples) == {"sent": 0, "retry": 0, "failed": 0}
    assert received(samples) == {"accepted": 0, "duplicate": 0, "ignored_sender": 0}
    assert sample(samples, "picobot_webhook_signature_failures_total") == 0
    assert sample(samples, "picobot_webhook_messages_processed_total") == 0


async def test_a_failing_platform_moves_retries_then_failures(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
) -> None:
    bot = await webhooks.start(generic, max_attempts=3)
    collector = WebhookMetrics(bot.server.stats)
    platform_api.fail(3, status=503)
    await post_generic(client, bot.url("generic"), message("hello", "m1"))
    await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivery_failures == 1), WAIT_SECS)
    samples = scrape(collector)
    assert deliveries(samples) == {"sent": 0, "retry": 2, "failed": 1}
    assert sample(samples, "picobot_webhook_messages_processed_total") == 1
    # The platform is back: the next reply goes out on its first attempt.
    await post_generic(client, bot.url("generic"), message("again", "m2"))
    await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 1), WAIT_SECS)
    assert deliveries(scrape(collector)) == {"sent": 1, "retry": 2, "failed": 1}


async def test_received_messages_by_outcome_and_bad_signatures(
    webhooks: Webhooks, client: aiohttp.ClientSession, platform_api: PlatformAPI
) -> None:
    settings = GenericWebhookSettings(
        enabled=True, callback_url=platform_api.url("/callback"), allowed_senders=["alice"]
    )
    bot: Running = await webhooks.start(GenericPlatform(settings, "test-secret"), run_workers=False)
    collector = WebhookMetrics(bot.server.stats)
    url = bot.url("generic")
    await post_generic(client, url, message("hi", "m1"))
    await post_generic(client, url, message("hi", "m1"))  # the platform redelivers
    await post_generic(client, url, message("hi", "m2", user="mallory"))
    status, _ = await post_generic(client, url, message("hi", "m3"), signature="sha256=00")
    assert status == 401
    samples = scrape(collector)
    assert received(samples) == {"accepted": 1, "duplicate": 1, "ignored_sender": 1}
    assert sample(samples, "picobot_webhook_signature_failures_total") == 1
