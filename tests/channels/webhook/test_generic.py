"""The generic signed webhook end to end: signatures, parsing, signed callbacks."""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from picobot.backoff import retry_after_secs
from picobot.channels.webhook.base import DeliveryError, WebhookError
from picobot.channels.webhook.common import ReplyApi
from picobot.channels.webhook.platforms.generic import GenericPlatform, sign
from picobot.config.channels import GenericWebhookSettings
from picobot.errors import ConfigError
from picobot.llm.scripted import ScriptedProvider
from tests.channels.gated import GatedProvider
from tests.channels.webhook.conftest import (
    SECRET,
    PlatformAPI,
    Running,
    Webhooks,
    message,
    post_generic,
    rows,
)
from tests.channels.webhook.generic_client import SIGNATURE_HEADER, callback_ok, signed_headers

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def provider() -> ScriptedProvider:
    return GatedProvider()


async def test_signed_message_is_acknowledged_before_the_turn_and_answered_signed(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
    provider: GatedProvider,
) -> None:
    bot = await webhooks.start(generic)
    status, answer = await post_generic(client, bot.url("generic"), message("hello", "m1"))
    # 200 while the model is still blocked: the turn runs after the acknowledgement.
    assert (status, answer) == (200, {"ok": True})
    await provider.entered.wait()
    assert platform_api.requests == []
    provider.gate.set()
    (request,) = await platform_api.wait_requests(1)
    assert request.path == "/callback"
    assert request.json() == {
        "chat": "c1",
        "user": "alice",
        "text": "You said: hello",
        "in_reply_to": "m1",
    }
    assert callback_ok(request.headers, request.body)
    await bot.server.wait_for(lambda s: s.delivered == 1)
    assert await bot.server.queue_depth() == 0
    # Processed and sent rows keep no text; the conversation lives in messages.
    assert await rows(bot.runtime, "SELECT text, status FROM webhook_inbox") == [("", "done")]
    assert await rows(bot.runtime, "SELECT text, status FROM outbound_queue") == [("", "sent")]


async def test_a_secret_waiting_in_the_inbox_is_stored_redacted(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    provider: GatedProvider,
) -> None:
    # The inbox holds a message until its turn runs (for ever, if its platform is
    # switched off meanwhile), so it must not hold it in clear either.
    key = "sk-proj-" + "Zx9" * 12
    bot = await webhooks.start(generic)
    status, _ = await post_generic(client, bot.url("generic"), message(f"my key {key}", "m1"))
    assert status == 200
    await provider.entered.wait()  # accepted, the turn waits at the model
    ((text,),) = await rows(bot.runtime, "SELECT picobot_open(text) FROM webhook_inbox")
    assert key not in str(text) and "[REDACTED:" in str(text)
    provider.gate.set()
    await bot.server.wait_for(lambda s: s.delivered == 1)


@pytest.mark.parametrize(
    ("signature", "reason"),
    [
        (None, "missing signature"),
        ("sha256=" + "0" * 64, "invalid signature"),
        (sign(b"another secret", json.dumps(message("hi", "m1")).encode()), "invalid signature"),
        ("garbage", "invalid signature"),
    ],
)
async def test_unsigned_or_badly_signed_message_is_refused_and_not_stored(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    signature: str | None,
    reason: str,
) -> None:
    bot = await webhooks.start(generic)
    status, answer = await post_generic(
        client, bot.url("generic"), message("hi", "m1"), signature=signature
    )
    assert (status, answer) == (401, {"error": reason})
    assert bot.server.stats.rejected_signature == 1
    assert await rows(bot.runtime, "SELECT * FROM webhook_inbox") == []
    assert await rows(bot.runtime, "SELECT * FROM sessions") == []


@pytest.mark.parametrize("tampered", ["body", "timestamp"])
async def test_the_signature_covers_the_exact_body_and_timestamp(
    webhooks: Webhooks, generic: GenericPlatform, client: aiohttp.ClientSession, tampered: str
) -> None:
    # An altered request, or a captured one made fresh again with a new timestamp.
    bot = await webhooks.start(generic)
    signed = json.dumps(message("pay 10", "m1")).encode()
    then = int(time.time()) - 60
    signature = signed_headers(signed, timestamp=then)[SIGNATURE_HEADER]
    body, stamp = signed, then
    if tampered == "body":
        body = signed.replace(b"pay 10", b"pay 99")
    else:
        stamp = int(time.time())
    status, answer = await post_generic(
        client, bot.url("generic"), body, timestamp=stamp, signature=signature
    )
    assert (status, answer) == (401, {"error": "invalid signature"})


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"\xff\xfe",
        b"[1, 2]",
        json.dumps({"user": "alice", "chat": "c1", "text": "hi"}).encode(),
        json.dumps({"user": 7, "chat": "c1", "text": "hi", "message_id": "m1"}).encode(),
        json.dumps({"user": "", "chat": "c1", "text": "hi", "message_id": "m1"}).encode(),
        json.dumps({"user": "alice", "chat": "c1", "text": "   ", "message_id": "m1"}).encode(),
        json.dumps(message("hi", "m1", user="x" * 257)).encode(),
        json.dumps(message("hi", "m1", user="al\nice")).encode(),
        json.dumps(message("x" * 32_001, "m1")).encode(),
    ],
)
async def test_malformed_body_is_400_and_not_stored(
    webhooks: Webhooks, generic: GenericPlatform, client: aiohttp.ClientSession, body: bytes
) -> None:
    bot = await webhooks.start(generic)
    status, answer = await post_generic(client, bot.url("generic"), body)
    assert status == 400 and "error" in answer
    assert await rows(bot.runtime, "SELECT * FROM webhook_inbox") == []


async def test_user_id_is_namespaced_and_only_a_valid_signature_can_name_it(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
    provider: GatedProvider,
) -> None:
    provider.gate.set()
    bot = await webhooks.start(generic)
    spoof = message("I am the telegram user", "m1", user="telegram:42")
    # Without the secret, claiming a user gets nowhere.
    status, _ = await post_generic(client, bot.url("generic"), spoof, secret="guessed")
    assert status == 401
    assert await rows(bot.runtime, "SELECT * FROM sessions") == []
    # The signer vouches for its users, but only inside the generic namespace.
    status, _ = await post_generic(client, bot.url("generic"), spoof)
    assert status == 200
    await bot.server.wait_for(lambda s: s.delivered == 1)
    owners = await rows(bot.runtime, "SELECT channel, user_id FROM sessions")
    assert owners == [("generic", "generic:telegram:42")]


@pytest.fixture
async def answering(
    webhooks: Webhooks, generic: GenericPlatform, provider: GatedProvider
) -> Running:
    """The generic webhook served, with the model answering at once."""
    provider.gate.set()
    return await webhooks.start(generic)


async def test_a_message_id_is_a_redelivery_only_from_the_same_user_in_the_same_chat(
    answering: Running, client: aiohttp.ClientSession, platform_api: PlatformAPI
) -> None:
    bot, url = answering, answering.url("generic")
    firsts = [
        message("from ana", "m-1", user="ana", chat="c1"),
        message("from bob", "m-1", user="bob", chat="c2"),
        message("bob in ana's chat", "m-1", user="bob", chat="c1"),
        # Separators inside the names cannot make two messages one.
        message("colon in the user", "m-1", user="x:y", chat="z"),
        message("colon in the chat", "m-1", user="x", chat="y:z"),
    ]
    for body in [*firsts, message("from ana", "m-1", user="ana", chat="c1")]:
        assert (await post_generic(client, url, body))[0] == 200
    # Bounded: a message taken for a duplicate would leave this waiting forever.
    await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == len(firsts)), 10)
    assert (bot.server.stats.accepted, bot.server.stats.duplicates) == (len(firsts), 1)
    answers = sorted(tuple(r.json().values()) for r in platform_api.requests)
    assert answers == sorted(
        (m["chat"], m["user"], f"You said: {m['text']}", "m-1") for m in firsts
    )


async def test_get_without_a_handshake_is_405(
    webhooks: Webhooks, generic: GenericPlatform, client: aiohttp.ClientSession
) -> None:
    bot = await webhooks.start(generic)
    async with client.get(bot.url("generic")) as resp:
        assert resp.status == 405


def test_from_settings_reads_the_secret_from_the_named_env_var(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = GenericWebhookSettings(
        enabled=True, secret_env="MY_HOOK_SECRET", callback_url="https://example.com/cb"
    )
    with pytest.raises(ConfigError, match="MY_HOOK_SECRET"):
        GenericPlatform.from_settings(settings)
    monkeypatch.setenv("MY_HOOK_SECRET", "  ")
    with pytest.raises(ConfigError, match="MY_HOOK_SECRET"):
        GenericPlatform.from_settings(settings)
    monkeypatch.setenv("MY_HOOK_SECRET", "abc")
    platform = GenericPlatform.from_settings(settings)
    assert platform.name == "generic"
    assert platform.allowed_senders == frozenset()


async def test_send_classifies_failures(
    platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    settings = GenericWebhookSettings(enabled=True, callback_url=platform_api.url("/cb"))
    platform = GenericPlatform(settings, SECRET)
    target = {"chat": "c1", "user": "alice", "in_reply_to": "m1"}
    platform_api.reply(503, headers={"Retry-After": "7"})
    platform_api.reply(429)
    platform_api.reply(404)
    platform_api.reply(302, headers={"Location": platform_api.url("/elsewhere")})
    outcomes = []
    for _ in range(4):
        with pytest.raises(DeliveryError) as info:
            await platform.send(client, target, "hi")
        outcomes.append((str(info.value), info.value.retry, info.value.retry_after_secs))
    assert outcomes == [
        ("callback answered HTTP 503", True, 7.0),
        ("callback answered HTTP 429", True, None),
        ("callback answered HTTP 404", False, None),
        ("callback answered HTTP 302", False, None),
    ]
    assert [r.path for r in platform_api.requests] == ["/cb"] * 4
    await platform.send(client, target, "hi")


async def test_send_to_an_unreachable_callback_is_retryable(client: aiohttp.ClientSession) -> None:
    # Port 9 on loopback (discard) is closed on any test machine: connection refused.
    settings = GenericWebhookSettings(enabled=True, callback_url="http://127.0.0.1:9/cb")
    with pytest.raises(DeliveryError) as info:
        await GenericPlatform(settings, SECRET).send(client, {"chat": "c"}, "hi")
    assert info.value.retry


@pytest.mark.parametrize(
    "url",
    [
        "",
        "  ",
        "example.com/picobot-replies",
        "htps://example.com/cb",
        "ftp://example.com/cb",
        "http://",
        "http:///cb",
        "http://example.com:99999/cb",
        "http://[::1/cb",
        "https://example.com/c b?token=s3cr3t",
        "https://example.com/\ncb?token=s3cr3t",
    ],
)
def test_a_callback_url_that_cannot_work_is_a_config_error(url: str) -> None:
    settings = GenericWebhookSettings(enabled=True, callback_url=url)
    with pytest.raises(ConfigError, match=r"channels\.webhook\.generic\.callback_url") as info:
        GenericPlatform(settings, SECRET)
    assert "s3cr3t" not in str(info.value)  # a URL may carry a token: never echoed


def test_serve_refuses_to_start_without_a_usable_callback_url(tmp_path: Path) -> None:
    env = {
        **os.environ,
        # The code under test, also where an installed copy would come first.
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "PICOBOT_DATA__DIR": str(tmp_path / "data"),
        "PICOBOT_LLM__PROVIDER": "scripted",
        "PICOBOT_SERVER__PORT": "0",
        "PICOBOT_CHANNELS__WEBHOOK__GENERIC__ENABLED": "true",
        "PICOBOT_GENERIC_WEBHOOK_SECRET": SECRET,
    }
    env.pop("PICOBOT_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "picobot", "serve"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,  # a server that started anyway would run until this kills it
        check=False,
    )
    assert done.returncode == 3  # a configuration error
    # The log lines of the start-up come first; the last line says what to fix.
    assert done.stderr.splitlines()[-1] == (
        "picobot: error: channels.webhook.generic.callback_url is not set: replies are"
        " POSTed there, so it must be an absolute http:// or https:// URL such as"
        " https://host/path"
    )


@pytest.mark.parametrize("url", ["example.com/cb", "ftp://example.com/cb"])
async def test_a_url_aiohttp_cannot_use_is_not_retried(
    client: aiohttp.ClientSession, url: str
) -> None:
    with pytest.raises(DeliveryError) as info:
        await ReplyApi("callback").post_body(client, url, b"{}")
    assert (str(info.value), info.value.retry) == ("callback: the configured URL is invalid", False)


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    assert retry_after_secs("12") == 12.0
    assert retry_after_secs(" 0.5 ") == 0.5
    assert retry_after_secs("-3") == 0.0
    assert retry_after_secs(None) is None
    assert retry_after_secs("soon") is None
    date = email.utils.formatdate(1_000_060, usegmt=True)
    assert retry_after_secs(date, now=1_000_000) == 60.0


def test_verify_errors_are_webhook_errors() -> None:
    settings = GenericWebhookSettings(enabled=True, callback_url="https://example.com/cb")
    platform = GenericPlatform(settings, SECRET)
    with pytest.raises(WebhookError) as info:
        platform.parse(b"null")
    assert info.value.status == 400


# Signed timestamps ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("stamp", "reason"),
    [
        ("", "missing timestamp"),
        *((bad, "invalid timestamp") for bad in ["12.5", "1e9", "-1", "9" * 13]),
        (-400, "stale timestamp"),  # an offset from now: too old
        (400, "stale timestamp"),  # too far ahead
    ],
)
async def test_a_missing_malformed_or_stale_timestamp_is_refused(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    stamp: str | int,
    reason: str,
) -> None:
    bot = await webhooks.start(generic)
    sent = int(time.time()) + stamp if isinstance(stamp, int) else stamp
    status, answer = await post_generic(
        client, bot.url("generic"), message("hi", "m1"), timestamp=sent
    )
    assert (status, answer) == (401, {"error": reason})
    assert await rows(bot.runtime, "SELECT * FROM webhook_inbox") == []


async def test_a_body_only_signature_is_refused_by_default(
    webhooks: Webhooks, generic: GenericPlatform, client: aiohttp.ClientSession
) -> None:
    bot = await webhooks.start(generic)
    status, answer = await post_generic(
        client, bot.url("generic"), message("hi", "m1"), legacy=True
    )
    assert (status, answer) == (401, {"error": "missing timestamp"})


async def test_a_body_only_signature_passes_when_timestamps_are_optional(
    webhooks: Webhooks,
    platform_api: PlatformAPI,
    client: aiohttp.ClientSession,
    provider: GatedProvider,
) -> None:
    lenient = GenericPlatform(
        GenericWebhookSettings(
            enabled=True, callback_url=platform_api.url("/callback"), require_timestamp=False
        ),
        SECRET,
    )
    bot = await webhooks.start(lenient)
    status, _ = await post_generic(client, bot.url("generic"), message("hi", "m1"), legacy=True)
    assert status == 200
    provider.gate.set()
    # Its callbacks are signed the old way too, so the same client can check them.
    (request,) = await platform_api.wait_requests(1)
    assert "X-PicoBot-Timestamp" not in request.headers
    assert request.headers["X-PicoBot-Signature"] == sign(SECRET.encode(), request.body)
    # A timestamp, when sent, is still checked.
    stale = int(time.time()) - 600
    status, answer = await post_generic(
        client, bot.url("generic"), message("hi", "m2"), timestamp=stale
    )
    assert (status, answer) == (401, {"error": "stale timestamp"})
