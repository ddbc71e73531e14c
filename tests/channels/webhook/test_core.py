"""The webhook core: limits, de-duplication, durable inbox, ordered retried delivery.

The generic platform is the concrete platform here (it is real and needs no outside
service); the platform API is the local stand-in ``platform_api``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from picobot.channels.webhook.base import PlatformMessage
from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.channels.webhook.workers import SORRY
from picobot.config.channels import GenericWebhookSettings, WebhookSettings
from picobot.config.settings import Settings
from picobot.kernel.kernel import MODEL_FAILED
from picobot.llm.scripted import ScriptedProvider, ScriptedTurn
from picobot.messages import Identity, Inbound, OutboundKind
from picobot.runtime import Runtime, open_runtime
from picobot.store.channels.webhooks import WebhookStore
from tests.channels.gated import GatedProvider
from tests.channels.webhook.conftest import (
    SECRET,
    FakeClock,
    PlatformAPI,
    Webhooks,
    message,
    post_generic,
    rows,
    texts,
)
from tests.channels.webhook.generic_client import signed_headers


async def test_body_over_the_limit_is_413_with_or_without_content_length(
    webhooks: Webhooks, generic: GenericPlatform, client: aiohttp.ClientSession
) -> None:
    bot = await webhooks.start(generic, settings=WebhookSettings(max_body_bytes=1024))
    url = bot.url("generic")
    base = json.dumps(message("hi", "m1")).encode()
    exact = base + b" " * (1024 - len(base))
    status, _ = await post_generic(client, url, exact)
    assert status == 200
    big = base + b" " * 1025
    status, answer = await post_generic(client, url, big)
    assert (status, answer) == (413, {"error": "body too large"})

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b" " * 512

    # Chunked: no Content-Length up front, so the cap applies while reading.
    headers = signed_headers(b" " * 5120)
    async with client.post(url, data=chunks(), headers=headers) as resp:
        assert resp.status == 413
    assert bot.server.stats.accepted == 1
    assert bot.server.stats.rejected_signature == 0


async def test_redelivered_message_is_answered_once(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
) -> None:
    bot = await webhooks.start(generic)
    url = bot.url("generic")
    assert (await post_generic(client, url, message("hello", "m1")))[0] == 200
    assert (await post_generic(client, url, message("hello", "m1")))[0] == 200
    # A later message of the same chat is answered after anything owed before it.
    assert (await post_generic(client, url, message("second", "m2")))[0] == 200
    await bot.server.wait_for(lambda s: s.delivered == 2)
    assert texts(platform_api) == ["You said: hello", "You said: second"]
    assert (bot.server.stats.accepted, bot.server.stats.duplicates) == (2, 1)


async def test_redelivery_after_a_restart_is_still_a_duplicate(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
    bot_settings: Settings,
) -> None:
    first = await webhooks.start(generic)
    await post_generic(client, first.url("generic"), message("hello", "m1"))
    await first.server.wait_for(lambda s: s.delivered == 1)
    await first.stop()
    async with open_runtime(bot_settings, provider=ScriptedProvider()) as rt:
        second = await webhooks.start(generic, runtime=rt)
        url = second.url("generic")
        assert (await post_generic(client, url, message("hello", "m1")))[0] == 200
        await post_generic(client, url, message("after restart", "m2"))
        await second.server.wait_for(lambda s: s.delivered == 1)
        await second.stop()
    assert second.server.stats.duplicates == 1
    assert texts(platform_api) == ["You said: hello", "You said: after restart"]


async def test_failing_callback_is_retried_and_delivered_exactly_once(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
) -> None:
    platform_api.fail(3, status=500)
    bot = await webhooks.start(generic)
    await post_generic(client, bot.url("generic"), message("hello", "m1"))
    stats = await bot.server.wait_for(lambda s: s.delivered == 1)
    assert (stats.delivery_retries, stats.delivery_failures) == (3, 0)
    assert texts(platform_api) == ["You said: hello"] * 4
    assert await rows(bot.runtime, "SELECT status, attempts FROM outbound_queue") == [("sent", 4)]


async def test_delivery_gives_up_after_max_attempts_and_on_permanent_errors(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
) -> None:
    platform_api.fail(3, status=502)
    platform_api.fail(1, status=403)
    bot = await webhooks.start(generic, max_attempts=3)
    url = bot.url("generic")
    await post_generic(client, url, message("one", "m1"))
    await post_generic(client, url, message("two", "m2"))
    await post_generic(client, url, message("three", "m3"))
    stats = await bot.server.wait_for(lambda s: s.delivered == 1)
    assert (stats.delivery_failures, stats.delivery_retries) == (2, 2)
    # A reply that failed for good does not hold back the rest of the chat.
    assert texts(platform_api) == ["You said: one"] * 3 + ["You said: two", "You said: three"]
    queue = await rows(
        bot.runtime, "SELECT status, attempts, last_error FROM outbound_queue ORDER BY id"
    )
    assert queue == [
        ("failed", 3, "callback answered HTTP 502"),
        ("failed", 1, "callback answered HTTP 403"),
        ("sent", 1, None),
    ]
    assert await bot.server.queue_depth() == 0


async def test_retry_after_is_honoured_and_replies_of_a_chat_stay_in_order(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
) -> None:
    clock = FakeClock()
    platform_api.fail(1, status=429, headers={"Retry-After": "30"})
    bot = await webhooks.start(generic, clock=clock)
    url = bot.url("generic")
    for i, text in enumerate(["one", "two", "three"]):
        await post_generic(client, url, message(text, f"m{i}"))
    await bot.server.wait_for(lambda s: s.delivery_retries == 1 and s.processed == 3)
    ((first_due, attempts),) = await rows(
        bot.runtime,
        "SELECT next_attempt_at, attempts FROM outbound_queue WHERE status='pending'"
        " ORDER BY id LIMIT 1",
    )
    assert first_due == pytest.approx(clock.now + 30) and attempts == 1
    # While "one" waits, nothing of that chat is due: "two" must not overtake it.
    assert await bot.store.due_outbound(clock.now + 29, 10) == []
    assert await bot.server.queue_depth() == 3
    clock.advance(30)
    bot.server.wake()
    await bot.server.wait_for(lambda s: s.delivered == 3)
    assert texts(platform_api) == ["You said: one"] * 2 + ["You said: two", "You said: three"]


async def test_chats_run_concurrently_and_each_chat_in_order(
    bot_settings: Settings,
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
) -> None:
    provider = GatedProvider(only="slow")
    async with open_runtime(bot_settings, provider=provider) as rt:
        bot = await webhooks.start(generic, runtime=rt)
        url = bot.url("generic")
        await post_generic(client, url, message("slow one", "a1", chat="A"))
        await post_generic(client, url, message("quick two", "a2", chat="A"))
        await post_generic(client, url, message("hi from B", "b1", chat="B", user="bob"))
        # B is answered while A's first turn is still blocked.
        await bot.server.wait_for(lambda s: s.delivered == 1)
        assert texts(platform_api) == ["You said: hi from B"]
        provider.gate.set()
        await bot.server.wait_for(lambda s: s.delivered == 3)
        await bot.stop()
    assert texts(platform_api)[1:] == ["You said: slow one", "You said: quick two"]


async def test_accepted_messages_are_processed_after_a_crash(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
    bot_settings: Settings,
) -> None:
    crashed = await webhooks.start(generic, run_workers=False)
    for i, text in enumerate(["before", "the crash"]):
        status, _ = await post_generic(client, crashed.url("generic"), message(text, f"m{i}"))
        assert status == 200
    assert await crashed.store.inbox_depth() == 2
    await crashed.stop()
    assert platform_api.requests == []
    async with open_runtime(bot_settings, provider=ScriptedProvider()) as rt:
        restarted = await webhooks.start(generic, runtime=rt)
        await restarted.server.wait_for(lambda s: s.delivered == 2)
        await restarted.stop()
        queued = await rows(rt, "SELECT inbox_id, seq, status FROM outbound_queue ORDER BY id")
    assert texts(platform_api) == ["You said: before", "You said: the crash"]
    assert queued == [(1, 0, "sent"), (2, 0, "sent")]


async def test_turn_cut_short_by_shutdown_runs_again_on_the_next_start(
    bot_settings: Settings,
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
) -> None:
    provider = GatedProvider(only="slow")
    async with open_runtime(bot_settings, provider=provider) as rt:
        bot = await webhooks.start(generic, runtime=rt)
        await post_generic(client, bot.url("generic"), message("slow", "m1"))
        await provider.entered.wait()  # the user's message is stored, the model runs
        await bot.stop()  # the turn is blocked, so it is cancelled
        assert await bot.store.inbox_depth() == 1
        provider.gate.set()
        again = await webhooks.start(generic, runtime=rt)
        await again.server.wait_for(lambda s: s.delivered == 1)
        stored = await rows(rt, "SELECT role, picobot_open(content) FROM messages ORDER BY id")
    assert texts(platform_api) == ["You said: slow"]
    # The second run found the message stored and did not store it again.
    assert stored == [("user", "slow"), ("assistant", "You said: slow")]


async def test_turn_run_again_after_its_reply_was_stored_sends_that_reply(
    runtime: Runtime,
    provider: ScriptedProvider,
    webhooks: Webhooks,
    generic: GenericPlatform,
    platform_api: PlatformAPI,
) -> None:
    # A crash after the turn stored its reply, before the inbox row was marked done:
    # the worker's steps up to that point, done by hand.
    store = WebhookStore(runtime.db)
    msg = PlatformMessage("m1", "generic:alice", "c1", "alice", "hello there", {"chat": "c1"})
    inbox_id = await store.accept("generic", msg)
    assert await store.start_processing(inbox_id or 0) == 1
    inbound = Inbound(Identity("generic", "generic:alice", "c1"), "hello there", message_id="m1")
    first = [e.text async for e in runtime.kernel.handle(inbound) if e.kind == OutboundKind.DONE]
    assert first == ["You said: hello there"] and len(provider.prompts) == 1

    bot = await webhooks.start(generic)
    await bot.server.wait_for(lambda s: s.delivered == 1)
    assert texts(platform_api) == ["You said: hello there"]
    assert len(provider.prompts) == 1  # the model was not asked again
    stored = await rows(runtime, "SELECT role, picobot_open(content) FROM messages ORDER BY id")
    assert stored == [("user", "hello there"), ("assistant", "You said: hello there")]
    assert await rows(runtime, "SELECT status FROM webhook_inbox") == [("done",)]


async def test_a_message_that_keeps_failing_is_answered_with_an_apology(
    runtime: Runtime, webhooks: Webhooks, generic: GenericPlatform, platform_api: PlatformAPI
) -> None:
    store = WebhookStore(runtime.db)
    msg = PlatformMessage("m1", "generic:alice", "c1", "alice", "boom", {"chat": "c1"})
    inbox_id = await store.accept("generic", msg)
    for _ in range(3):
        await store.start_processing(inbox_id or 0)
    bot = await webhooks.start(generic)
    await bot.server.wait_for(lambda s: s.delivered == 1)
    assert texts(platform_api) == [SORRY]
    assert await rows(runtime, "SELECT status FROM webhook_inbox") == [("failed",)]
    assert await rows(runtime, "SELECT * FROM messages") == []


async def test_model_failure_is_answered_with_the_kernels_error_text(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
    provider: ScriptedProvider,
) -> None:
    provider.add(ScriptedTurn(fail=True))
    bot = await webhooks.start(generic)
    await post_generic(client, bot.url("generic"), message("hello", "m1"))
    await bot.server.wait_for(lambda s: s.delivered == 1)
    assert texts(platform_api) == [MODEL_FAILED]


async def test_sender_not_on_the_allow_list_is_ignored_with_200(
    webhooks: Webhooks,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
) -> None:
    settings = GenericWebhookSettings(
        enabled=True, callback_url=platform_api.url("/callback"), allowed_senders=["alice"]
    )
    bot = await webhooks.start(GenericPlatform(settings, SECRET))
    url = bot.url("generic")
    status, _ = await post_generic(client, url, message("let me in", "x1", user="mallory"))
    assert status == 200
    await post_generic(client, url, message("hello", "a1", user="alice"))
    await bot.server.wait_for(lambda s: s.delivered == 1)
    assert [r.json()["user"] for r in platform_api.requests] == ["alice"]
    assert bot.server.stats.ignored_senders == 1
    assert await rows(bot.runtime, "SELECT user_id FROM webhook_inbox") == [("generic:alice",)]
    assert await rows(bot.runtime, "SELECT user_id FROM sessions") == [("generic:alice",)]


async def test_purge_is_confirmed_with_y_over_the_webhook(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
    runtime: Runtime,
) -> None:
    bot = await webhooks.start(generic)
    url = bot.url("generic")
    await post_generic(client, url, message("my secret plan", "m1"))
    await bot.server.wait_for(lambda s: s.delivered == 1)
    await post_generic(client, url, message("/purge user", "m2"))
    await bot.server.wait_for(lambda s: s.delivered == 2)
    prompt = texts(platform_api)[1]
    assert "1 session, 2 messages" in prompt and "y or n" in prompt
    await post_generic(client, url, message("y", "m3"))
    await bot.server.wait_for(lambda s: s.delivered == 3)
    assert texts(platform_api)[2].startswith("Deleted ")
    assert "2 messages" in texts(platform_api)[2]
    assert await rows(runtime, "SELECT * FROM messages") == []
    assert await rows(runtime, "SELECT * FROM sessions") == []


async def test_purge_answered_with_anything_but_y_deletes_nothing(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
    runtime: Runtime,
) -> None:
    bot = await webhooks.start(generic)
    url = bot.url("generic")
    await post_generic(client, url, message("keep me", "m1"))
    await post_generic(client, url, message("/purge user", "m2"))
    await post_generic(client, url, message("s", "m3"))
    await bot.server.wait_for(lambda s: s.delivered == 3)
    assert "nothing was deleted" in texts(platform_api)[2]
    assert len(await rows(runtime, "SELECT * FROM messages")) == 2
