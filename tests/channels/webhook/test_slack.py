"""Slack Events API: v0 signatures and their time window, url_verification, parsing,
chat.postMessage replies, end to end."""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request

from picobot.channels.webhook.base import DeliveryError, WebhookError
from picobot.channels.webhook.platforms.slack import SlackPlatform
from picobot.channels.webhook.signing import hmac_sha256_hex
from picobot.config.channels import SlackSettings, WebhookSettings
from picobot.errors import ConfigError
from picobot.runtime import Runtime
from tests.channels.webhook.conftest import FakeClock, PlatformAPI, Webhooks

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOT_TOKEN = "xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy"


def platform(
    base_url: str = "http://127.0.0.1:1",
    clock: FakeClock | None = None,
    **overrides: Any,
) -> SlackPlatform:
    settings = SlackSettings(enabled=True, api_base_url=base_url, **overrides)
    return SlackPlatform(
        settings, signing_secret=SIGNING_SECRET, bot_token=BOT_TOKEN, clock=clock or time.time
    )


def event(
    text: str | None = "hello",
    event_id: str = "Ev01",
    *,
    user: str = "U2147483697",
    team: str = "T0001",
    **fields: Any,
) -> dict[str, Any]:
    """An event_callback with a message event, as Slack sends it."""
    inner: dict[str, Any] = {
        "type": "message",
        "channel": "D024BE91L",
        "user": user,
        "ts": "1355517523.000005",
        "event_ts": "1355517523.000005",
        "channel_type": "im",
        **fields,
    }
    if text is not None:
        inner["text"] = text
    return {
        "token": "legacy-verification-token",
        "team_id": team,
        "api_app_id": "A0PNCHHK2",
        "event": inner,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": 1355517523,
    }


def encode(payload: dict[str, Any] | bytes) -> bytes:
    return payload if isinstance(payload, bytes) else json.dumps(payload).encode()


def sign(body: bytes, stamp: str, secret: str = SIGNING_SECRET) -> str:
    return "v0=" + hmac_sha256_hex(secret, f"v0:{stamp}:".encode() + body)


def headers(body: bytes, *, stamp: str | None = None, sig: str | None = None) -> dict[str, str]:
    stamp = str(int(time.time())) if stamp is None else stamp
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": sign(body, stamp) if sig is None else sig,
    }


def request(head: dict[str, str]) -> Any:
    return make_mocked_request("POST", "/webhooks/slack", headers=head)


# Configuration -------------------------------------------------------------------


def test_from_settings_names_the_missing_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = SlackSettings(enabled=True, signing_secret_env="MY_SLACK_SECRET")
    monkeypatch.delenv("MY_SLACK_SECRET", raising=False)
    monkeypatch.setenv(settings.bot_token_env, BOT_TOKEN)
    with pytest.raises(ConfigError, match="MY_SLACK_SECRET"):
        SlackPlatform.from_settings(settings)
    monkeypatch.setenv("MY_SLACK_SECRET", SIGNING_SECRET)
    clock = FakeClock()
    slack = SlackPlatform.from_settings(settings, clock=clock)
    body = encode(event())
    slack.verify(request(headers(body, stamp=str(int(clock.now)))), body)
    clock.advance(301)
    with pytest.raises(WebhookError):
        slack.verify(request(headers(body, stamp=str(int(clock.now) - 301))), body)


# Signatures ----------------------------------------------------------------------


def test_verify_checks_the_signature_over_timestamp_and_exact_body() -> None:
    clock = FakeClock()
    slack = platform(clock=clock)
    body = encode(event())
    now = str(int(clock.now))
    slack.verify(request(headers(body, stamp=now)), body)
    bad: list[dict[str, str]] = [
        {},
        {"X-Slack-Request-Timestamp": now},
        {"X-Slack-Signature": sign(body, now)},
        headers(body, stamp=now, sig=sign(body, now, "other-secret")),
        headers(body, stamp=now, sig=sign(body, now)[3:]),  # no v0=
        headers(body, stamp=now, sig=sign(body + b" ", now)),
        # The signature of another moment does not carry over to this timestamp.
        headers(body, stamp=now, sig=sign(body, str(int(clock.now) - 1))),
        headers(body, stamp="12ab"),
        headers(body, stamp="-5"),
    ]
    for head in bad:
        with pytest.raises(WebhookError) as info:
            slack.verify(request(head), body)
        assert info.value.status == 401, head


@pytest.mark.parametrize("offset", [-301, 301, -86400, 86400])
def test_stale_or_future_timestamp_is_refused_even_when_signed(offset: int) -> None:
    clock = FakeClock()
    slack = platform(clock=clock)
    body = encode(event())
    stamp = str(int(clock.now) + offset)
    with pytest.raises(WebhookError) as info:
        slack.verify(request(headers(body, stamp=stamp)), body)
    assert (info.value.status, info.value.reason) == (401, "stale timestamp")
    # Inside the window either way is fine (clocks drift a little).
    inside = str(int(clock.now) + (299 if offset > 0 else -299))
    slack.verify(request(headers(body, stamp=inside)), body)


async def test_url_verification_is_answered_only_when_signed() -> None:
    clock = FakeClock()
    slack = platform(clock=clock)
    body = encode(
        {
            "token": "t",
            "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
            "type": "url_verification",
        }
    )
    now = str(int(clock.now))
    answer = await slack.handshake(request(headers(body, stamp=now)), body)
    assert answer is not None
    assert (answer.status, answer.content_type) == (200, "text/plain")
    assert answer.text == "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    for head in (
        {},
        headers(body, stamp=now, sig="v0=" + "0" * 64),
        headers(body, stamp=str(int(clock.now) - 600)),
    ):
        # Not answered; left to verify, which refuses it (the core counts that).
        assert await slack.handshake(request(head), body) is None
        with pytest.raises(WebhookError) as info:
            slack.verify(request(head), body)
        assert info.value.status == 401
    # Not handshakes: left to verify and parse.
    signed = encode(event())
    assert await slack.handshake(request(headers(signed, stamp=now)), signed) is None
    assert await slack.handshake(request({}), b"not json") is None
    assert slack.parse(body) == []


# Parsing -----------------------------------------------------------------------


def test_parse_message_builds_ids_from_team_and_user() -> None:
    (msg,) = platform().parse(encode(event("hi bot", "Ev9")))
    assert msg.message_id == "Ev9"
    assert msg.user_id == "slack:T0001:U2147483697"
    assert (msg.sender, msg.chat_id, msg.text) == ("T0001:U2147483697", "D024BE91L", "hi bot")
    assert msg.reply_to == {"channel": "D024BE91L"}
    (threaded,) = platform().parse(encode(event("in thread", thread_ts="1355517000.000001")))
    assert threaded.reply_to == {"channel": "D024BE91L", "thread_ts": "1355517000.000001"}


def test_parse_decodes_what_slack_escapes_and_keeps_its_syntax() -> None:
    typed = "is 1 &lt; 2 &amp;&amp; 3 &gt; 2? &amp;lt; stays typed, <@U0LAN0Z89> a mention"
    (msg,) = platform().parse(encode(event(typed)))
    assert msg.text == "is 1 < 2 && 3 > 2? &lt; stays typed, <@U0LAN0Z89> a mention"


def test_parse_skips_bots_edits_and_other_events() -> None:
    slack = platform()
    skipped = [
        event("from a bot", bot_id="B123"),
        event("bot message", subtype="bot_message"),
        event(None, subtype="message_changed", message={"user": "U1", "text": "edited"}),
        event("joined", subtype="channel_join"),
        event(None),
        event("   "),
    ]
    mention = event("<@U0LAN0Z89> hi")
    mention["event"]["type"] = "app_mention"
    no_user = event("who?")
    del no_user["event"]["user"]
    skipped += [mention, no_user, {"type": "app_rate_limited", "team_id": "T0001"}]
    for payload in skipped:
        assert slack.parse(encode(payload)) == [], payload


@pytest.mark.parametrize(
    "payload",
    [
        b"{oops",
        b'"event_callback"',
        {"event": {}},
        {"type": 5},
        {**event(), "team_id": None},
        {**event(), "team_id": "T1:U2"},
        {**event(), "event_id": "Ev 1"},
        {**event(), "event": "message"},
        event(user="U1@x"),
        event(channel=None),
        {**event(), "event": {**event()["event"], "text": 42}},
    ],
)
def test_malformed_bodies_are_400(payload: dict[str, Any] | bytes) -> None:
    with pytest.raises(WebhookError) as info:
        platform().parse(encode(payload))
    assert info.value.status == 400


# Sending ------------------------------------------------------------------------


async def test_send_posts_to_chat_post_message_with_the_bot_token(
    platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    slack = platform(platform_api.url("/api"))
    await slack.send(client, {"channel": "C1", "thread_ts": "1.2"}, "Hi there")
    (req,) = platform_api.requests
    assert (req.method, req.path) == ("POST", "/api/chat.postMessage")
    assert req.headers["Authorization"] == f"Bearer {BOT_TOKEN}"
    assert req.headers["Content-Type"] == "application/json; charset=utf-8"
    assert req.json() == {"channel": "C1", "text": "Hi there", "thread_ts": "1.2"}


async def test_send_escapes_what_slack_would_read_as_syntax(
    platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    slack = platform(platform_api.url(""))
    await slack.send(client, {"channel": "C1"}, "<!channel> <@U1> a&b <https://x.example|y>")
    (req,) = platform_api.requests
    assert req.json()["text"] == (
        "&lt;!channel&gt; &lt;@U1&gt; a&amp;b &lt;https://x.example|y&gt;"
    )


async def test_send_splits_long_replies_at_line_breaks(
    platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    slack = platform(platform_api.url(""))
    lines = [f"line {i}: " + "x" * 90 for i in range(100)]  # ~10k characters
    await slack.send(client, {"channel": "C1"}, "\n".join(lines))
    parts = [r.json()["text"] for r in platform_api.requests]
    assert len(parts) == 3 and all(len(p) <= 4000 for p in parts)
    assert "\n".join(parts).split("\n") == lines  # cut between lines, none lost


async def test_send_failures_are_classified(
    platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    slack = platform(platform_api.url(""))

    async def failure() -> DeliveryError:
        with pytest.raises(DeliveryError) as info:
            await slack.send(client, {"channel": "C1"}, "x")
        assert BOT_TOKEN not in str(info.value)
        return info.value

    platform_api.reply(200, {"ok": False, "error": "ratelimited"}, headers={"Retry-After": "30"})
    error = await failure()
    assert (error.retry, error.retry_after_secs) == (True, 30.0)
    platform_api.reply(200, {"ok": False, "error": "channel_not_found"})
    error = await failure()
    assert error.retry is False and "channel_not_found" in str(error)
    platform_api.reply(429, {"ok": False, "error": "ratelimited"}, headers={"Retry-After": "3"})
    error = await failure()
    assert (error.retry, error.retry_after_secs) == (True, 3.0)
    platform_api.reply(503, None)
    assert (await failure()).retry is True
    platform_api.reply(400, {"ok": False, "error": f"invalid_auth {BOT_TOKEN}"})
    assert (await failure()).retry is False
    platform_api.reply(200, None)  # not Slack's answer shape: do not trust it
    assert (await failure()).retry is False
    with pytest.raises(DeliveryError) as info:
        await platform("http://127.0.0.1:1").send(client, {"channel": "C1"}, "x")
    assert info.value.retry is True


# End to end ---------------------------------------------------------------------


async def post(
    client: aiohttp.ClientSession,
    url: str,
    payload: dict[str, Any] | bytes,
    head: dict[str, str] | None = None,
) -> tuple[int, str]:
    body = encode(payload)
    all_headers = {"Content-Type": "application/json", **(head or headers(body))}
    async with client.post(url, data=body, headers=all_headers) as resp:
        return resp.status, await resp.text()


async def user_ids(runtime: Runtime) -> list[str]:
    return [str(r[0]) for r in await runtime.db.fetchall("SELECT user_id FROM sessions", ())]


async def test_signed_event_is_acknowledged_then_answered_once(
    webhooks: Webhooks, platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    bot = await webhooks.start(platform(platform_api.url("/api")), run_workers=False)
    status, _ = await post(client, bot.url("slack"), event("hello", thread_ts="9.1"))
    assert status == 200
    assert await bot.store.inbox_depth() == 1 and platform_api.requests == []
    await bot.server.start()
    await bot.server.wait_for(lambda s: s.delivered == 1)
    (req,) = platform_api.requests
    assert req.path == "/api/chat.postMessage"
    assert req.headers["Authorization"] == f"Bearer {BOT_TOKEN}"
    assert req.json() == {"channel": "D024BE91L", "text": "You said: hello", "thread_ts": "9.1"}


async def test_escaped_text_round_trips_through_a_turn(
    webhooks: Webhooks, platform_api: PlatformAPI, client: aiohttp.ClientSession, runtime: Runtime
) -> None:
    bot = await webhooks.start(platform(platform_api.url("")))
    status, _ = await post(client, bot.url("slack"), event("is 1 &lt; 2 &amp;&amp; 3 &gt; 2?"))
    assert status == 200
    await bot.server.wait_for(lambda s: s.delivered == 1)
    stored = await runtime.db.fetchall(
        "SELECT picobot_open(content) FROM messages WHERE role = 'user'", ()
    )
    assert [r[0] for r in stored] == ["is 1 < 2 && 3 > 2?"]
    (req,) = platform_api.requests
    assert req.json()["text"] == "You said: is 1 &lt; 2 &amp;&amp; 3 &gt; 2?"


async def test_url_verification_through_the_server(
    webhooks: Webhooks, client: aiohttp.ClientSession
) -> None:
    bot = await webhooks.start(platform())
    challenge = {"token": "t", "challenge": "abc123", "type": "url_verification"}
    assert await post(client, bot.url("slack"), challenge) == (200, "abc123")
    body = encode(challenge)
    status, text = await post(client, bot.url("slack"), body, headers(body, sig="v0=00"))
    assert status == 401 and "abc123" not in text


async def test_spoofed_stale_and_retried_deliveries(
    webhooks: Webhooks,
    platform_api: PlatformAPI,
    client: aiohttp.ClientSession,
    runtime: Runtime,
) -> None:
    clock = FakeClock()
    bot = await webhooks.start(platform(platform_api.url(""), clock=clock))
    url = bot.url("slack")
    body = encode(event("hello", "Ev7"))
    now = str(int(clock.now))
    # Another user under the original signature: the user is part of what is signed.
    forged = body.replace(b"U2147483697", b"U0ADMIN000")
    assert (await post(client, url, forged, headers(body, stamp=now)))[0] == 401
    # A captured request replayed ten minutes later.
    clock.advance(600)
    assert (await post(client, url, body, headers(body, stamp=now)))[0] == 401
    assert bot.server.stats.rejected_signature == 2
    assert await bot.store.inbox_depth() == 0
    fresh = str(int(clock.now))
    assert (await post(client, url, body, headers(body, stamp=fresh)))[0] == 200
    # Slack retries with the same event_id, a new timestamp and signature.
    clock.advance(60)
    retry = headers(body, stamp=str(int(clock.now))) | {"X-Slack-Retry-Num": "1"}
    assert (await post(client, url, body, retry))[0] == 200
    await bot.server.wait_for(lambda s: s.delivered == 1)
    assert bot.server.stats.duplicates == 1
    assert len(platform_api.requests) == 1
    assert await user_ids(runtime) == ["slack:T0001:U2147483697"]


async def test_bot_echoes_allow_list_and_oversize_body(
    webhooks: Webhooks, platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    slack = platform(platform_api.url(""), allowed_senders=["T0001:U2147483697"])
    bot = await webhooks.start(slack, settings=WebhookSettings(max_body_bytes=2048))
    url = bot.url("slack")
    assert (await post(client, url, event("x" * 3000)))[0] == 413
    # Our own reply coming back as an event: acknowledged, not answered.
    assert (await post(client, url, event("You said: hi", "Ev1", bot_id="B1")))[0] == 200
    # Same user id in another workspace is another person.
    assert (await post(client, url, event("hi", "Ev2", team="T0002")))[0] == 200
    assert (await post(client, url, event("hi", "Ev3")))[0] == 200
    await bot.server.wait_for(lambda s: s.delivered == 1)
    assert bot.server.stats.ignored_senders == 1 and bot.server.stats.accepted == 1
    assert [r.json()["text"] for r in platform_api.requests] == ["You said: hi"]
