"""The delivery worker with replies it cannot send: those of a platform not enabled."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

from picobot.channels.webhook.base import PlatformMessage
from picobot.channels.webhook.generic import GenericPlatform
from picobot.channels.webhook.workers import BATCH
from picobot.runtime import Runtime
from picobot.store.webhooks import WebhookStore
from tests.webhook.conftest import PlatformAPI, Webhooks, message, post_generic

WAIT_SECS = 10.0
"""Long enough for a reply on a loaded machine; a starved one would wait forever."""


async def leave_pending_replies(store: WebhookStore, platform: str, chats: int) -> None:
    """What a run with ``platform`` enabled left behind: one unsent reply per chat."""
    for chat in range(chats):
        msg = PlatformMessage(f"{chat}:1", f"{platform}:{chat}", str(chat), str(chat), "hi")
        inbox_id = await store.accept(platform, msg)
        assert inbox_id is not None
        await store.mark_processed(
            inbox_id,
            ["the old secret reply"],
            platform=platform,
            reply_to={"chat_id": chat},
            user_id=msg.user_id,
            chat_id=msg.chat_id,
        )


async def test_replies_waiting_for_a_disabled_platform_hold_up_no_other_reply(
    runtime: Runtime,
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="picobot")
    store = WebhookStore(runtime.db)
    # More chats than one batch of heads: before, they filled every batch.
    await leave_pending_replies(store, "telegram", BATCH + 20)
    bot = await webhooks.start(generic, store=store)
    await post_generic(client, bot.url("generic"), message("hello", "m1"))
    await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 1), WAIT_SECS)
    await post_generic(client, bot.url("generic"), message("again", "m2"))
    await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 2), WAIT_SECS)
    assert [r.json()["text"] for r in platform_api.requests] == [
        "You said: hello",
        "You said: again",
    ]
    # Kept for when the platform is enabled again, not dropped.
    assert await store.pending_replies_by_platform() == {"telegram": BATCH + 20}
    # Said once, with the count and the platform, never the replies' text.
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        f"{BATCH + 20} webhook replies wait for platforms that are not enabled (telegram);"
        " they are kept and sent once the platform is enabled again"
    ]
    assert not any("old secret" in r.getMessage() for r in caplog.records)
