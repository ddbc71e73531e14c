"""Telegram long polling against a Bot API stand-in: replies, identity, offsets, errors.

The poller runs over a real runtime and webhook core (inbox, reply queue) on a SQLite
file; the stand-in is a real aiohttp server with getUpdates' long-poll semantics.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from picobot.backoff import Backoff
from picobot.channels.webhook.connections.base import OutboundConnections
from picobot.channels.webhook.connections.metrics import ConnectionMetrics
from picobot.channels.webhook.connections.registry import outbound_connections, routed
from picobot.channels.webhook.connections.telegram_polling import TelegramPoller
from picobot.channels.webhook.platforms.telegram import TelegramPlatform
from picobot.cli.status import StoreStatus, describe_status, status_json
from picobot.cli.status import read_status as store_status
from picobot.config.channels import TelegramSettings, WebhookSettings
from picobot.config.settings import Settings
from picobot.errors import ConfigError
from picobot.runtime import Runtime
from picobot.store.channels.channel_state import ChannelState
from tests.channels.webhook.conftest import FailsOnce, FakeClock, Running, Webhooks, rows
from tests.channels.webhook.telegram_api import TelegramAPI, telegram_api

BOT_TOKEN = "4242:polling-token-ABCdef0123456789"
USER = 5550001
OTHER = 5550002
FAST = Backoff(base_secs=0.01, cap_secs=0.05)
FLOOR = 0.01
"""The floor between polls that brought nothing (1 s in production)."""
WAIT = 20.0
"""Bound of every wait for the poller (a hang fails instead of blocking the suite)."""


def polling_platform(api: TelegramAPI, **overrides: Any) -> TelegramPlatform:
    options: dict[str, Any] = {"poll_timeout_secs": 1, **overrides}
    settings = TelegramSettings(enabled=True, mode="polling", api_base_url=api.base_url, **options)
    return TelegramPlatform(settings, secret_token=None, bot_token=BOT_TOKEN)


@pytest.fixture
async def api() -> AsyncIterator[TelegramAPI]:
    async with telegram_api(BOT_TOKEN) as stand_in:
        yield stand_in


class Polling:
    """A poller over a started webhook core; stopped at teardown."""

    def __init__(self, webhooks: Webhooks, runtime: Runtime) -> None:
        self.webhooks = webhooks
        self.runtime = runtime
        self.owners: list[OutboundConnections] = []

    async def start(
        self, platform: TelegramPlatform, poller: dict[str, Any] | None = None, **core: Any
    ) -> tuple[TelegramPoller, Running]:
        """Start the webhook core (``core``: its options) and a poller feeding it
        (``poller``: its options)."""
        running = await self.webhooks.start(platform, **core)
        options: dict[str, Any] = {"backoff": FAST, "floor_secs": FLOOR, **(poller or {})}
        connection = TelegramPoller(
            platform, running.server, ChannelState(self.runtime.db), **options
        )
        owner = OutboundConnections([connection], self.runtime.tasks)
        owner.start()
        self.owners.append(owner)
        return connection, running

    async def stop(self) -> None:
        for owner in self.owners:
            await owner.stop()
        self.owners.clear()


@pytest.fixture
async def polling(webhooks: Webhooks, runtime: Runtime) -> AsyncIterator[Polling]:
    p = Polling(webhooks, runtime)
    try:
        yield p
    finally:
        await p.stop()


async def sent(api: TelegramAPI, count: int) -> list[dict[str, Any]]:
    await asyncio.wait_for(api.wait(lambda a: len(a.sent) >= count), WAIT)
    return api.sent


async def test_polled_messages_are_answered_through_the_reply_queue(
    api: TelegramAPI, polling: Polling, runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    api.webhook_url = "https://old.example/webhooks/telegram"
    first = api.push("hello there", user=USER, chat=USER, message_id=1)
    caplog.set_level(logging.INFO)
    poller, running = await polling.start(polling_platform(api))
    second = api.push("and again", user=USER, chat=USER, message_id=2)

    replies = await sent(api, 2)
    assert [r["text"] for r in replies] == ["You said: hello there", "You said: and again"]
    await asyncio.wait_for(running.server.wait_for(lambda s: s.delivered >= 2), WAIT)
    assert {r["chat_id"] for r in replies} == {USER}
    # The stale webhook was deleted first (keeping the waiting updates), and the log says so.
    methods = [m for m, _ in api.calls]
    assert methods.index("deleteWebhook") < methods.index("getUpdates")
    assert ("deleteWebhook", {"drop_pending_updates": False}) in api.calls
    assert any("deleted it (deleteWebhook)" in r.getMessage() for r in caplog.records)
    assert api.webhook_url == ""
    # Through the durable inbox and reply queue, under the authenticated identity.
    assert await rows(runtime, "SELECT platform, user_id, status FROM webhook_inbox") == [
        ("telegram", f"telegram:{USER}", "done"),
        ("telegram", f"telegram:{USER}", "done"),
    ]
    assert await rows(runtime, "SELECT status FROM outbound_queue") == [("sent",), ("sent",)]
    state = ChannelState(runtime.db)
    assert await state.offset("telegram", max_age_secs=60) == second + 1
    assert first < second
    assert poller.status.connected and poller.status.last_update_at is not None
    assert all(p["allowed_updates"] == ["message"] for p in api.polls())
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("picobot")]
    assert ours and not any(BOT_TOKEN in line for line in ours)


async def test_identity_comes_from_the_update_not_from_what_it_claims(
    api: TelegramAPI, polling: Polling, runtime: Runtime
) -> None:
    # A message whose text and extra fields claim to be someone else.
    api.push(
        "user_id=telegram:1 I am the admin",
        user=USER,
        chat=USER,
        message_id=1,
        forward_from={"id": 1, "is_bot": False, "first_name": "Admin"},
        sender_chat={"id": 1, "type": "private"},
        user_id="telegram:1",
    )
    # A sender not on the allow-list, and another bot: never answered.
    api.push("let me in", user=OTHER, chat=OTHER, message_id=2)
    bot = api.push("beep", user=6660001, chat=USER, message_id=3)
    api.pending[-1]["message"]["from"]["is_bot"] = True
    await polling.start(polling_platform(api, allowed_senders=[str(USER)]))

    past_all = bot + 1
    await asyncio.wait_for(
        api.wait(lambda a: any(p.get("offset") == past_all for p in a.polls())), WAIT
    )
    replies = await sent(api, 1)
    assert [r["chat_id"] for r in replies] == [USER]
    users = await rows(runtime, "SELECT DISTINCT user_id FROM sessions")
    assert users == [(f"telegram:{USER}",)]
    assert await rows(runtime, "SELECT user_id FROM webhook_inbox") == [(f"telegram:{USER}",)]


async def test_429_and_network_errors_back_off_then_polling_resumes(
    api: TelegramAPI, polling: Polling, runtime: Runtime
) -> None:
    api.too_many_requests(retry_after=1)
    api.plan.append((502, {"ok": False, "error_code": 502, "description": "Bad Gateway"}))
    poller, _ = await polling.start(polling_platform(api))
    api.push("after the storm", user=USER, chat=USER, message_id=7)

    assert [r["text"] for r in await sent(api, 1)] == ["You said: after the storm"]
    assert poller.status.errors == 2
    assert poller.status.last_error is not None and "502" in poller.status.last_error
    assert BOT_TOKEN not in poller.status.last_error
    [record] = await ChannelState(runtime.db).connections()
    assert (record.channel, record.mode, record.state) == ("telegram", "polling", "connected")
    assert record.errors == 2 and record.last_update_at is not None


async def test_a_webhook_set_while_polling_is_deleted_again_after_409(
    api: TelegramAPI, polling: Polling
) -> None:
    poller, _ = await polling.start(polling_platform(api))
    await asyncio.wait_for(api.wait(lambda a: len(a.polls()) >= 1), WAIT)
    api.webhook_url = "https://someone.example/hook"  # set behind our back: 409 next
    await asyncio.wait_for(poller.status.wait_for(lambda s: s.errors >= 1), WAIT)
    assert "409" in (poller.status.last_error or "")
    api.push("still here", user=USER, chat=USER, message_id=9)
    assert [r["text"] for r in await sent(api, 1)] == ["You said: still here"]
    assert [m for m, _ in api.calls].count("deleteWebhook") == 1


async def test_a_restart_asks_from_the_saved_offset(
    api: TelegramAPI, polling: Polling, runtime: Runtime
) -> None:
    last = 0
    for n in range(3):
        last = api.push(f"message {n}", user=USER, chat=USER, message_id=n + 1)
    await polling.start(polling_platform(api))
    await sent(api, 3)
    await polling.stop()
    polls_before = len(api.polls())

    await polling.start(polling_platform(api))
    await asyncio.wait_for(api.wait(lambda a: len(a.polls()) > polls_before), WAIT)
    assert api.polls()[polls_before]["offset"] == last + 1
    assert sorted(api.served) == sorted(set(api.served))  # nothing was served twice
    assert len(await rows(runtime, "SELECT id FROM webhook_inbox")) == 3


async def test_stop_ends_a_held_long_poll_and_records_stopped(
    api: TelegramAPI, polling: Polling, runtime: Runtime
) -> None:
    poller, _ = await polling.start(polling_platform(api, poll_timeout_secs=50))
    await asyncio.wait_for(api.wait(lambda a: len(a.polls()) >= 1), WAIT)
    await asyncio.wait_for(polling.stop(), WAIT)
    assert poller.status.state == "stopped"
    [record] = await ChannelState(runtime.db).connections()
    assert record.state == "stopped"


async def test_metrics_show_each_connection(api: TelegramAPI, polling: Polling) -> None:
    poller, _ = await polling.start(polling_platform(api))
    api.push("count me", user=USER, chat=USER, message_id=1)
    await sent(api, 1)
    registry = CollectorRegistry()
    registry.register(ConnectionMetrics([poller.status]))
    text = generate_latest(registry).decode()
    labels = '{channel="telegram",mode="polling"}'
    assert f"picobot_channel_connected{labels} 1.0" in text
    assert f"picobot_channel_connection_errors_total{labels} 0.0" in text
    assert f"picobot_channel_last_update_timestamp_seconds{labels}" in text


def test_polling_needs_no_secret_token_but_a_webhook_does() -> None:
    settings = TelegramSettings(enabled=True, mode="polling")
    platform = TelegramPlatform(settings, secret_token=None, bot_token=BOT_TOKEN)
    assert routed([platform]) == []
    webhook = TelegramSettings(enabled=True)
    with pytest.raises(ConfigError, match="PICOBOT_TELEGRAM_SECRET_TOKEN"):
        TelegramPlatform(webhook, secret_token=None, bot_token=BOT_TOKEN)
    hooked = TelegramPlatform(webhook, secret_token="s3cret", bot_token=BOT_TOKEN)
    assert routed([hooked]) == ["telegram"]
    assert outbound_connections([hooked], _NoSink(), ChannelState.__new__(ChannelState)) == []


class _NoSink:
    max_body_bytes = 262_144

    async def take(self, platform: Any, messages: Any, *, next_offset: int | None = None) -> None:
        raise AssertionError("no connection should take anything")


async def test_status_shows_the_connection_as_the_server_recorded_it(
    api: TelegramAPI, polling: Polling, bot_settings: Settings
) -> None:
    api.too_many_requests(retry_after=0)
    await polling.start(polling_platform(api))
    api.push("status please", user=USER, chat=USER, message_id=1)
    await sent(api, 1)

    found = await store_status(bot_settings)
    assert isinstance(found, StoreStatus)
    lines, warnings = describe_status(found, 3600, time.time())
    [line] = [x for x in lines if x.startswith("connection telegram")]
    assert line.startswith("connection telegram (polling): connected since ")
    assert "1 error(s) (last: Telegram getUpdates answered HTTP 429" in line
    assert "last update never" not in line
    assert not any("telegram" in w for w in warnings)
    [shown] = status_json(bot_settings.db_path, (1, 0), found, bot_settings, [])["connections"]
    assert (shown["channel"], shown["state"], shown["errors"]) == ("telegram", "connected", 1)
    assert BOT_TOKEN not in str(shown)

    await polling.stop()
    stopped = await store_status(bot_settings)
    assert isinstance(stopped, StoreStatus)
    assert stopped.connections[0].state == "stopped"


async def test_updates_that_could_not_be_stored_are_fetched_again(
    api: TelegramAPI, polling: Polling, runtime: Runtime
) -> None:
    update = api.push("keep me", user=USER, chat=USER, message_id=1)
    poller, _ = await polling.start(polling_platform(api), store=FailsOnce(runtime))
    assert [r["text"] for r in await sent(api, 1)] == ["You said: keep me"]
    assert api.served.count(update) == 2  # not confirmed until it was stored
    assert poller.status.errors == 1 and "store" in (poller.status.last_error or "")
    assert len(await rows(runtime, "SELECT id FROM webhook_inbox")) == 1


def chat_message(text: str, message_id: int, **fields: Any) -> dict[str, Any]:
    """A private text message from USER, as in an update."""
    return {
        "message_id": message_id,
        "from": {"id": USER, "is_bot": False, "first_name": "Ann"},
        "chat": {"id": USER, "type": "private", "first_name": "Ann"},
        "date": int(time.time()),
        "text": text,
        **fields,
    }


def answer(*updates: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A getUpdates answer with ``updates``, for the stand-in's plan."""
    return 200, {"ok": True, "result": list(updates)}


async def test_malformed_updates_are_skipped_logged_once_and_polling_goes_on(
    api: TelegramAPI, polling: Polling, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    batch = [
        {"update_id": 2**63, "message": chat_message("id too large", 1)},
        {"update_id": "400001", "message": chat_message("id of a string", 2)},
        {"update_id": 400001, "message": chat_message("from the far future", 3, date=10**400)},
        {"update_id": 400002, "message": chat_message("huge id", 2**64)},
        {"update_id": 400003, "message": "not an object"},
        {"update_id": 400004, "message": chat_message("date of a float", 5, date=1.5)},
        {"update_id": 400005, "message": chat_message("a good one", 6)},
    ]
    # The same batch again (a platform that repeats itself), then a date too long to read.
    api.plan += [answer(*batch), answer(*batch)]
    digits = b"1" + b"0" * 5000
    raw = json.dumps(answer({"update_id": 400006, "message": chat_message("x", 7)})[1])
    api.plan.append((200, raw.encode().replace(b'"date": ', b'"date": ' + digits + b', "d": ')))
    poller, _ = await polling.start(polling_platform(api))
    await asyncio.wait_for(
        api.wait(lambda a: any(p.get("offset") == 400007 for p in a.polls())), WAIT
    )
    api.push("still polling", user=USER, chat=USER, message_id=8)

    replies = await sent(api, 2)
    assert [r["text"] for r in replies] == ["You said: a good one", "You said: still polling"]
    assert poller.status.errors == 0
    ours = [r for r in caplog.records if r.name.startswith("picobot")]
    assert not [r for r in ours if r.levelno >= logging.ERROR or r.exc_info]
    skipped = sorted(r.getMessage() for r in ours if "skipped" in r.getMessage())
    # One line per kind, however often it came.
    assert skipped == [
        "telegram: skipped an update without a valid update_id",
        "telegram: skipped update 400001: message.date is out of range",
        "telegram: skipped update 400002: message.message_id is out of range",
        "telegram: skipped update 400003: update.message must be a JSON object",
        "telegram: skipped update 400004: message.date must be an integer",
    ]


async def test_a_lower_update_id_never_moves_the_offset_back(
    api: TelegramAPI, polling: Polling, runtime: Runtime
) -> None:
    first = api.push("first", user=USER, chat=USER, message_id=1)
    await polling.start(polling_platform(api))
    await sent(api, 1)
    # A lower update id arrives later: its message is answered, the offset stays.
    api.plan.append(answer({"update_id": 100, "message": chat_message("late", 2)}))
    await asyncio.wait_for(api.wait(lambda a: not a.plan), WAIT)
    second = api.push("after", user=USER, chat=USER, message_id=3)

    assert [r["text"] for r in await sent(api, 3)] == [
        "You said: first",
        "You said: late",
        "You said: after",
    ]
    offsets = [p["offset"] for p in api.polls() if "offset" in p]
    assert offsets and offsets == sorted(offsets) and offsets[0] == first + 1
    state = ChannelState(runtime.db)
    await asyncio.wait_for(
        api.wait(lambda a: second + 1 in [p.get("offset") for p in a.polls()]), WAIT
    )
    assert await state.offset("telegram", max_age_secs=60) == second + 1


async def test_an_offset_that_has_not_moved_for_a_day_follows_restarted_ids(
    api: TelegramAPI, polling: Polling, runtime: Runtime
) -> None:
    clock = FakeClock()
    first = api.push("first", user=USER, chat=USER, message_id=1)
    await polling.start(polling_platform(api), poller={"clock": clock})
    await sent(api, 1)
    clock.advance(2 * 86_400)  # a quiet week later Telegram restarts update ids at random
    api.plan.append(answer({"update_id": 100, "message": chat_message("restarted", 2)}))
    await asyncio.wait_for(api.wait(lambda a: 101 in [p.get("offset") for p in a.polls()]), WAIT)
    assert first + 1 in [p.get("offset") for p in api.polls()]
    assert await ChannelState(runtime.db).offset("telegram", max_age_secs=60) == 101


async def test_a_bot_api_that_answers_at_once_is_not_polled_in_a_hot_loop(
    api: TelegramAPI, polling: Polling
) -> None:
    api.instant = True  # getUpdates answers [] at once, whatever its timeout
    floor, window = 0.2, 1.0
    await polling.start(polling_platform(api), poller={"floor_secs": floor})
    await asyncio.wait_for(api.wait(lambda a: len(a.polls()) >= 1), WAIT)
    before = len(api.polls())
    await asyncio.sleep(window)
    # At most one poll per floor (before: thousands of calls in a few seconds).
    assert len(api.polls()) - before <= window / floor + 1
    # Still polling: a message is fetched at the next poll.
    api.push("are you there", user=USER, chat=USER, message_id=1)
    assert [r["text"] for r in await sent(api, 1)] == ["You said: are you there"]


async def test_an_update_over_the_body_limit_is_skipped_never_stored(
    api: TelegramAPI, polling: Polling, runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    api.push("x" * 300_000, user=USER, chat=USER, message_id=1)  # webhooks stop at 256 KiB
    api.push("small", user=USER, chat=USER, message_id=2)
    poller, _ = await polling.start(polling_platform(api))
    assert [r["text"] for r in await sent(api, 1)] == ["You said: small"]
    assert len(await rows(runtime, "SELECT id FROM webhook_inbox")) == 1
    [(longest,)] = await rows(runtime, "SELECT max(length(content)) FROM messages")
    assert isinstance(longest, int) and longest < 100
    assert "telegram: skipped update 500001: over 262144 bytes" in caplog.messages
    assert poller.status.errors == 0


async def test_a_batch_too_long_to_read_is_fetched_one_update_at_a_time(
    api: TelegramAPI, polling: Polling, runtime: Runtime
) -> None:
    # Each update over the 1 KiB limit; together over what one answer may hold
    # (100 updates of 1 KiB and 64 KiB besides): never read whole, never stuck.
    api.push("y" * 100_000, user=USER, chat=USER, message_id=1)
    api.push("z" * 100_000, user=USER, chat=USER, message_id=2)
    api.push("small", user=USER, chat=USER, message_id=3)
    poller, _ = await polling.start(
        polling_platform(api), settings=WebhookSettings(max_body_bytes=1024)
    )
    assert [r["text"] for r in await sent(api, 1)] == ["You said: small"]
    assert [p["limit"] for p in api.polls()[:3]] == [100, 1, 100]
    assert poller.status.errors == 1
    assert "the answer is over 167936 bytes" in (poller.status.last_error or "")
    assert len(await rows(runtime, "SELECT id FROM webhook_inbox")) == 1
