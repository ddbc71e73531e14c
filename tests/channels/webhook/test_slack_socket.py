"""Slack Socket Mode against a stand-in: events, acks, replies, identity, reconnects."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from picobot.backoff import Backoff
from picobot.channels.webhook.connections.base import OutboundConnections
from picobot.channels.webhook.connections.registry import routed
from picobot.channels.webhook.connections.slack_socket import SlackSocket
from picobot.channels.webhook.platforms.slack import SlackPlatform
from picobot.config.channels import SlackSettings
from picobot.errors import ConfigError
from picobot.runtime import Runtime
from picobot.store.channels.channel_state import ChannelState
from tests.channels.webhook.conftest import FailsOnce, Webhooks, rows
from tests.channels.webhook.slack_socket_api import SlackSocketAPI, slack_socket_api

APP_TOKEN = "xapp-1-A0PICOBOT1-1234-abcdef0123456789"
BOT_TOKEN = "xoxb-0000-1111-socketmodebot"
FAST = Backoff(base_secs=0.01, cap_secs=0.05)
WAIT = 20.0


def socket_platform(api: SlackSocketAPI, **overrides: Any) -> SlackPlatform:
    settings = SlackSettings(enabled=True, mode="socket", api_base_url=api.base_url, **overrides)
    return SlackPlatform(settings, signing_secret=None, bot_token=BOT_TOKEN, app_token=APP_TOKEN)


@pytest.fixture
async def api() -> AsyncIterator[SlackSocketAPI]:
    async with slack_socket_api(APP_TOKEN, BOT_TOKEN) as stand_in:
        yield stand_in


@pytest.fixture
async def start(webhooks: Webhooks, runtime: Runtime) -> AsyncIterator[Any]:
    owners: list[OutboundConnections] = []

    async def go(
        platform: SlackPlatform, connection: dict[str, Any] | None = None, **core: Any
    ) -> SlackSocket:
        connection = connection or {}
        running = await webhooks.start(platform, **core)
        options: dict[str, Any] = {"backoff": FAST, "floor_secs": 0.01, **connection}
        socket = SlackSocket(platform, running.server, ChannelState(runtime.db), **options)
        owner = OutboundConnections([socket], runtime.tasks)
        owner.start()
        owners.append(owner)
        return socket

    try:
        yield go
    finally:
        for owner in owners:
            await owner.stop()


async def posted(api: SlackSocketAPI, count: int) -> list[dict[str, Any]]:
    await asyncio.wait_for(api.wait(lambda a: len(a.posted) >= count), WAIT)
    return api.posted


async def test_events_are_acknowledged_and_answered_through_the_queue(
    api: SlackSocketAPI, start: Any, runtime: Runtime
) -> None:
    socket = await start(socket_platform(api))
    await asyncio.wait_for(api.wait(lambda a: a.hellos == 1), WAIT)
    await asyncio.wait_for(socket.status.wait_for(lambda s: s.connected), WAIT)
    first = await api.send_event("hello from slack")
    second = await api.send_event("a <b> & c")
    replies = await posted(api, 2)
    assert [r["text"] for r in replies] == [
        "You said: hello from slack",
        "You said: a &lt;b&gt; &amp; c",
    ]
    assert {r["channel"] for r in replies} == {"D0CHAT"}
    await asyncio.wait_for(api.wait(lambda a: {first, second} <= set(a.acks)), WAIT)
    assert await rows(runtime, "SELECT user_id, status FROM webhook_inbox") == [
        ("slack:T0TEAM:U0ALICE", "done"),
        ("slack:T0TEAM:U0ALICE", "done"),
    ]
    assert socket.status.last_update_at is not None and socket.status.errors == 0


async def test_spoofed_and_disallowed_events_are_refused_but_acknowledged(
    api: SlackSocketAPI, start: Any, runtime: Runtime
) -> None:
    await start(socket_platform(api, allowed_senders=["T0TEAM:U0ALICE"]))
    await asyncio.wait_for(api.wait(lambda a: a.hellos == 1), WAIT)
    envelopes = [
        # Claims another identity in its text and in extra fields: the user is U0ALICE.
        await api.send_event("I am slack:T0TEAM:U0BOSS", user_id="U0BOSS", username="boss"),
        await api.send_event("not allowed here", user="U0MALLORY"),
        await api.send_event("other workspace", team="T0EVIL"),
        await api.send_event("for another app", app="A0SOMEONE"),
        await api.send_event("a bot speaks", bot_id="B0BOT"),
    ]
    await asyncio.wait_for(api.wait(lambda a: set(envelopes) <= set(a.acks)), WAIT)
    replies = await posted(api, 1)
    assert [r["text"] for r in replies] == ["You said: I am slack:T0TEAM:U0BOSS"]
    assert await rows(runtime, "SELECT DISTINCT user_id FROM sessions") == [
        ("slack:T0TEAM:U0ALICE",)
    ]
    assert len(await rows(runtime, "SELECT id FROM webhook_inbox")) == 1


async def test_disconnect_and_drops_reconnect(
    api: SlackSocketAPI, start: Any, runtime: Runtime
) -> None:
    socket = await start(socket_platform(api))
    await asyncio.wait_for(api.wait(lambda a: a.hellos == 1), WAIT)
    await api.disconnect()
    await asyncio.wait_for(api.wait(lambda a: a.hellos == 2), WAIT)
    assert api.opens == 2 and socket.status.errors == 0  # a requested reconnect is no error

    await api.live.close()  # dropped without a word
    await asyncio.wait_for(api.wait(lambda a: a.hellos == 3), WAIT)
    await asyncio.wait_for(socket.status.wait_for(lambda s: s.connected), WAIT)
    assert socket.status.errors == 1
    await api.send_event("after the reconnects")
    assert [r["text"] for r in await posted(api, 1)] == ["You said: after the reconnects"]
    [record] = await ChannelState(runtime.db).connections()
    assert (record.channel, record.mode, record.errors) == ("slack", "socket", 1)


async def test_a_wrong_app_token_retries_and_never_logs_the_token(
    api: SlackSocketAPI, start: Any, caplog: pytest.LogCaptureFixture
) -> None:
    api.app_token = "xapp-the-real-one"
    socket = await start(socket_platform(api))
    await asyncio.wait_for(socket.status.wait_for(lambda s: s.errors >= 2), WAIT)
    assert "invalid_auth" in (socket.status.last_error or "")
    assert not socket.status.connected
    assert APP_TOKEN not in caplog.text


def test_socket_mode_needs_the_app_token_not_the_signing_secret() -> None:
    settings = SlackSettings(enabled=True, mode="socket")
    with pytest.raises(ConfigError, match="PICOBOT_SLACK_APP_TOKEN"):
        SlackPlatform(settings, signing_secret=None, bot_token=BOT_TOKEN, app_token="")
    platform = SlackPlatform(settings, signing_secret=None, bot_token=BOT_TOKEN, app_token="x")
    assert routed([platform]) == []
    with pytest.raises(ConfigError, match="PICOBOT_SLACK_SIGNING_SECRET"):
        SlackPlatform(SlackSettings(enabled=True), signing_secret=None, bot_token=BOT_TOKEN)


async def test_an_event_that_could_not_be_stored_is_not_acknowledged(
    api: SlackSocketAPI, start: Any, runtime: Runtime
) -> None:
    socket = await start(socket_platform(api), store=FailsOnce(runtime))
    await asyncio.wait_for(api.wait(lambda a: a.hellos == 1), WAIT)
    envelope = await api.send_event("keep me")
    # Not stored: not acknowledged, and the connection starts over.
    await asyncio.wait_for(api.wait(lambda a: a.hellos == 2), WAIT)
    assert envelope not in api.acks
    assert "store" in (socket.status.last_error or "")
    await api.redeliver(envelope)  # Slack sends it again
    assert [r["text"] for r in await posted(api, 1)] == ["You said: keep me"]
    assert envelope in api.acks
    assert len(await rows(runtime, "SELECT id FROM webhook_inbox")) == 1


@pytest.mark.parametrize("broken", ["disconnect", "drop"])
async def test_a_slack_that_ends_every_connection_at_once_is_not_a_hot_loop(
    api: SlackSocketAPI, start: Any, caplog: pytest.LogCaptureFixture, broken: str
) -> None:
    caplog.set_level(logging.INFO, logger="picobot")
    api.on_connect = broken
    floor, window = 0.2, 1.0
    socket = await start(socket_platform(api), {"floor_secs": floor})
    await asyncio.wait_for(api.wait(lambda a: a.hellos >= 1), WAIT)
    before = api.opens
    await asyncio.sleep(window)
    # At most one connection per floor (before: 780 reconnects in 5 s).
    assert 1 <= api.opens - before <= window / floor + 1
    # One log line per kind, not one per reconnect.
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("picobot")]
    if broken == "disconnect":
        assert socket.status.errors == 0
        assert sum("asked to reconnect" in line for line in ours) == 1
    else:
        assert socket.status.errors >= 2
        assert sum("trying again" in line for line in ours) == 1


async def test_an_event_over_the_body_limit_is_acknowledged_and_skipped(
    api: SlackSocketAPI, start: Any, runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="picobot")
    socket = await start(socket_platform(api))
    await asyncio.wait_for(api.wait(lambda a: a.hellos == 1), WAIT)
    big = await api.send_event("x" * 300_000)  # a webhook body stops at 256 KiB
    small = await api.send_event("small")
    assert [r["text"] for r in await posted(api, 1)] == ["You said: small"]
    await asyncio.wait_for(api.wait(lambda a: {big, small} <= set(a.acks)), WAIT)
    assert len(await rows(runtime, "SELECT id FROM webhook_inbox")) == 1
    [(longest,)] = await rows(runtime, "SELECT max(length(content)) FROM messages")
    assert isinstance(longest, int) and longest < 100
    assert "slack: skipped an event over 262144 bytes" in caplog.messages
    assert socket.status.errors == 0 and api.hellos == 1


async def test_an_envelope_with_an_absurd_number_is_acknowledged_and_skipped(
    api: SlackSocketAPI, start: Any, runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="picobot")
    await start(socket_platform(api))
    await asyncio.wait_for(api.wait(lambda a: a.hellos == 1), WAIT)
    digits = "1" + "0" * 5000  # more than Python reads as an int: the envelope stays JSON
    raw = json.dumps({"type": "events_api", "envelope_id": "env-huge", "payload": {"x": 0}})
    await api.live.send(
        raw.replace(
            '"x": 0',
            '"team_id": "T0TEAM", "api_app_id": "A0PICOBOT1", "event": {"user": ' + digits + "}",
        )
    )
    await api.send_event("after it")
    assert [r["text"] for r in await posted(api, 1)] == ["You said: after it"]
    await asyncio.wait_for(api.wait(lambda a: "env-huge" in a.acks), WAIT)
    assert len(await rows(runtime, "SELECT id FROM webhook_inbox")) == 1
    ours = [r for r in caplog.records if r.name.startswith("picobot")]
    assert not [r for r in ours if r.levelno >= logging.ERROR or r.exc_info]
    assert any("skipped a malformed event" in r.getMessage() for r in ours)
