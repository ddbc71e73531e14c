"""Replays: a captured signed request never brings purged data back, and is not fresh
for ever.

Each platform's request is captured once (exact bytes and headers) and posted again
after the user was purged, as an attacker holding a copy (a proxy log, say) would.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

import aiohttp
import pytest

from picobot.channels.webhook.base import Platform
from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.channels.webhook.signing import seen_key
from picobot.config.channels import GenericWebhookSettings, WebhookSettings
from picobot.store.channels.webhook_seen import (
    MAX_MESSAGE_AGE_SECS,
    SEEN_KEEP_SECS,
    SeenRecords,
    plain_key,
)
from picobot.store.erasure.export import count_user_data
from picobot.store.erasure.purge import PurgeStore
from picobot.tasks.retention import RetentionTask
from tests.channels.webhook import test_slack as slack
from tests.channels.webhook import test_telegram as telegram
from tests.channels.webhook import test_whatsapp as whatsapp
from tests.channels.webhook.conftest import FakeClock, PlatformAPI, Running, Webhooks, rows
from tests.channels.webhook.generic_client import signed_headers

TEXT = "my diary entry zq81"


@dataclass(frozen=True)
class Captured:
    """A signed request as it went over the wire, and whose message it carries."""

    platform: Platform
    body: bytes
    headers: dict[str, str]
    user_id: str


def capture(name: str, api: PlatformAPI, *, sent: float | None = None) -> Captured:
    """A signed request of platform ``name`` carrying TEXT (sent at ``sent``, or now)."""
    json_type = {"Content-Type": "application/json"}
    if name == "whatsapp":
        body = whatsapp.encode(
            whatsapp.notification(whatsapp.text_message(TEXT, "wamid.R1", sent=sent))
        )
        return Captured(
            whatsapp.platform(api.url("/v21.0")),
            body,
            {**json_type, "X-Hub-Signature-256": whatsapp.signature(body)},
            "whatsapp:15551234567@s.whatsapp.net",
        )
    if name == "telegram":
        body = telegram.encode(telegram.update(TEXT, 10, chat=telegram.USER, sent=sent))
        return Captured(
            telegram.platform(api.url("")),
            body,
            {**json_type, "X-Telegram-Bot-Api-Secret-Token": telegram.SECRET_TOKEN},
            f"telegram:{telegram.USER}",
        )
    if name == "slack":
        body = slack.encode(slack.event(TEXT))
        return Captured(
            slack.platform(api.url("")),
            body,
            {**json_type, **slack.headers(body)},
            "slack:T0001:U2147483697",
        )
    body = json.dumps({"user": "alice", "chat": "c1", "text": TEXT, "message_id": "m1"}).encode()
    generic = GenericPlatform(
        GenericWebhookSettings(enabled=True, callback_url=api.url("/callback")), "test-secret"
    )
    return Captured(generic, body, signed_headers(body), "generic:alice")


async def replay(client: aiohttp.ClientSession, bot: Running, captured: Captured) -> int:
    async with client.post(
        bot.url(captured.platform.name), data=captured.body, headers=captured.headers
    ) as resp:
        return resp.status


@pytest.mark.parametrize("name", ["whatsapp", "telegram", "slack", "generic"])
async def test_a_replay_after_a_user_purge_is_acknowledged_but_not_stored_or_answered(
    webhooks: Webhooks, platform_api: PlatformAPI, client: aiohttp.ClientSession, name: str
) -> None:
    captured = capture(name, platform_api)
    bot = await webhooks.start(captured.platform)
    assert await replay(client, bot, captured) == 200
    await bot.server.wait_for(lambda s: s.delivered == 1)
    counts = await PurgeStore(bot.runtime.db).delete_user(captured.user_id)
    assert counts.messages == 2 and counts.webhook_rows == 2

    # 200: the platform must not retry it; but it is a duplicate, not a new message.
    assert await replay(client, bot, captured) == 200
    await bot.server.wait_for(lambda s: s.duplicates + s.accepted == 2)
    assert bot.server.stats.duplicates == 1
    assert await rows(bot.runtime, "SELECT * FROM messages") == []
    assert await rows(bot.runtime, "SELECT * FROM webhook_inbox") == []
    assert await rows(bot.runtime, "SELECT * FROM outbound_queue") == []
    assert (await count_user_data(bot.runtime.db, captured.user_id)).empty
    assert len(platform_api.requests) == 1  # answered once, before the purge


async def test_the_replay_guard_keeps_a_keyed_hash_and_a_time_only(
    webhooks: Webhooks, platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    captured = capture("whatsapp", platform_api)
    bot = await webhooks.start(captured.platform, run_workers=False)
    assert await replay(client, bot, captured) == 200
    ((key, seen_at),) = await rows(bot.runtime, "SELECT * FROM webhook_seen")
    assert key == seen_key(whatsapp.APP_SECRET, "whatsapp", "wamid.R1")
    # Not the plain hash: without the app secret, guessing ids cannot confirm one.
    assert key != plain_key("whatsapp", "wamid.R1") and len(bytes(key)) == 32
    assert isinstance(seen_at, float)
    # A purge leaves it: it holds nothing of the user, and it is what stops a replay.
    await PurgeStore(bot.runtime.db).delete_user(captured.user_id)
    assert await SeenRecords(bot.runtime.db).count() == 1


@pytest.mark.parametrize("name", ["whatsapp", "telegram"])
@pytest.mark.parametrize(
    "age", [MAX_MESSAGE_AGE_SECS + 60, -2 * 3600], ids=["older than 7 days", "2h ahead"]
)
async def test_a_message_sent_outside_the_window_is_acknowledged_and_dropped(
    webhooks: Webhooks,
    platform_api: PlatformAPI,
    client: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
    name: str,
    age: float,
) -> None:
    captured = capture(name, platform_api, sent=time.time() - age)
    bot = await webhooks.start(captured.platform, run_workers=False)
    with caplog.at_level(logging.INFO):
        assert await replay(client, bot, captured) == 200
    assert bot.server.stats.stale == 1 and bot.server.stats.accepted == 0
    assert await bot.store.inbox_depth() == 0
    assert await SeenRecords(bot.runtime.db).count() == 0
    # The log says what happened without the text or the message id.
    assert "dropped a message sent more than 604800s ago" in caplog.text
    assert TEXT not in caplog.text and "wamid" not in caplog.text


@pytest.mark.parametrize("name", ["whatsapp", "telegram"])
async def test_the_max_age_is_configurable_and_a_late_redelivery_within_it_is_accepted(
    webhooks: Webhooks, platform_api: PlatformAPI, client: aiohttp.ClientSession, name: str
) -> None:
    settings = WebhookSettings(max_message_age_secs=3600)
    late = capture(name, platform_api, sent=time.time() - 3000)
    bot = await webhooks.start(late.platform, settings=settings, run_workers=False)
    assert await replay(client, bot, late) == 200
    assert bot.server.stats.accepted == 1
    stale = capture(name, platform_api, sent=time.time() - 3700)
    assert await replay(client, bot, stale) == 200
    assert bot.server.stats.stale == 1 and bot.server.stats.accepted == 1


def test_the_max_age_setting_cannot_outlast_the_replay_guard() -> None:
    # A message the server accepts must still find its record: the record outlives it.
    assert WebhookSettings(max_message_age_secs=MAX_MESSAGE_AGE_SECS)
    with pytest.raises(ValueError, match="max_message_age_secs"):
        WebhookSettings(max_message_age_secs=MAX_MESSAGE_AGE_SECS + 1)
    assert SEEN_KEEP_SECS > MAX_MESSAGE_AGE_SECS


async def test_retention_prunes_old_records_only(
    webhooks: Webhooks, platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    clock = FakeClock()
    captured = capture("telegram", platform_api, sent=clock.now)
    bot = await webhooks.start(captured.platform, run_workers=False)
    assert await replay(client, bot, captured) == 200
    db = bot.runtime.db
    old, recent = clock.now - SEEN_KEEP_SECS - 1, clock.now - SEEN_KEEP_SECS + 60
    await db.execute_write(
        "INSERT INTO webhook_seen (key, seen_at) VALUES (?, ?), (?, ?)",
        (b"o" * 32, old, b"r" * 32, recent),
    )
    await RetentionTask(db, max_age_days=90, clock=clock).run()
    kept = {bytes(r[0]) for r in await rows(bot.runtime, "SELECT key FROM webhook_seen")}
    assert kept == {b"r" * 32, telegram.platform().seen_key(f"{telegram.USER}:10")}
