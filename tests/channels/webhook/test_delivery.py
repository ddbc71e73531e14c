"""The webhook workers with work they cannot do: that of a platform not enabled."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

from picobot.channels.webhook.base import PlatformMessage
from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.channels.webhook.workers import BATCH
from picobot.runtime import Runtime
from picobot.store.channels.webhooks import WebhookStore
from tests.channels.gated import GatedProvider
from tests.channels.webhook.conftest import PlatformAPI, Running, Webhooks, message, post_generic

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


async def two_generic_turns_answered(
    bot: Running, client: aiohttp.ClientSession, platform_api: PlatformAPI
) -> None:
    """Two generic-webhook messages, each answered and delivered in turn."""
    for n, text in enumerate(("hello", "again"), start=1):
        await post_generic(client, bot.url("generic"), message(text, f"m{n}"))
        await asyncio.wait_for(bot.server.wait_for(lambda s, n=n: s.delivered == n), WAIT_SECS)
    assert [r.json()["text"] for r in platform_api.requests] == [
        "You said: hello",
        "You said: again",
    ]


async def leave_pending_messages(store: WebhookStore, platform: str, chats: int) -> None:
    """What a run with ``platform`` enabled left behind: one unanswered message per chat."""
    for chat in range(chats):
        msg = PlatformMessage(f"{chat}:1", f"{platform}:{chat}", str(chat), str(chat), "secret q")
        assert await store.accept(platform, msg) is not None


@pytest.mark.parametrize(("what", "done"), [("replies", "sent"), ("messages", "answered")])
async def test_work_left_for_a_disabled_platform_holds_up_nothing_and_is_named_once(
    runtime: Runtime,
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
    caplog: pytest.LogCaptureFixture,
    what: str,
    done: str,
) -> None:
    caplog.set_level(logging.INFO, logger="picobot")
    store = WebhookStore(runtime.db)
    # More chats than one batch: before, they filled every batch of replies, and every
    # dispatch of the inbox paged through all the messages.
    leave = leave_pending_replies if what == "replies" else leave_pending_messages
    await leave(store, "telegram", BATCH + 20)
    bot = await webhooks.start(generic, store=store)
    await two_generic_turns_answered(bot, client, platform_api)
    assert bot.server.stats.processed == 2
    # Kept for when the platform is enabled again, not dropped.
    assert await store.pending_replies_by_platform() == (
        {"telegram": BATCH + 20} if what == "replies" else {}
    )
    assert await store.pending_messages_by_platform() == (
        {"telegram": BATCH + 20} if what == "messages" else {}
    )
    assert await store.pending_inbox(BATCH, ["generic"]) == []
    # Said once, with the count and the platform, never the text.
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"{BATCH + 20} webhook {what} wait for platforms that are not enabled (telegram);"
        f" they are kept and {done} once the platform is enabled again"
    ]
    assert not any("secret" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("provider", [GatedProvider()], ids=["gated"])
async def test_reply_of_a_turn_finished_within_the_grace_period_is_sent_before_close(
    provider: GatedProvider,
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
) -> None:
    """Before, the delivery worker stopped at once: the turn finished, but its reply
    waited in the queue for the next start, however far off that was."""
    bot = await webhooks.start(generic)
    await post_generic(client, bot.url("generic"), message("hello", "m1"))
    await provider.entered.wait()
    closing = asyncio.create_task(bot.server.close(grace_secs=WAIT_SECS))
    await asyncio.sleep(0)  # the close has begun: no new turns, no new sends
    provider.gate.set()
    await closing
    assert await bot.store.queue_depth() == 0
    assert [r.json()["text"] for r in platform_api.requests] == ["You said: hello"]
