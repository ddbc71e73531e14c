"""WhatsApp Cloud API end to end: signed notifications through the webhook server,
answered through the stand-in Graph API."""

from __future__ import annotations

from typing import Any

import aiohttp

from picobot.config.channels import WebhookSettings
from picobot.runtime import Runtime
from tests.channels.webhook.conftest import PlatformAPI, Webhooks
from tests.channels.webhook.test_whatsapp import (
    ACCESS_TOKEN,
    NUMBER,
    VERIFY_TOKEN,
    encode,
    notification,
    platform,
    signature,
    text_message,
)


async def post(
    client: aiohttp.ClientSession,
    url: str,
    payload: dict[str, Any] | bytes,
    *,
    sig: str | None = None,
    extra_headers: dict[str, str] | None = None,
) -> int:
    body = encode(payload)
    headers = {"Content-Type": "application/json", **(extra_headers or {})}
    headers["X-Hub-Signature-256"] = signature(body) if sig is None else sig
    async with client.post(url, data=body, headers=headers) as resp:
        return resp.status


async def user_ids(runtime: Runtime) -> list[str]:
    return [str(r[0]) for r in await runtime.db.fetchall("SELECT user_id FROM sessions", ())]


async def test_signed_message_is_acknowledged_then_answered_once(
    webhooks: Webhooks, platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    bot = await webhooks.start(platform(platform_api.url("/v21.0")), run_workers=False)
    status = await post(client, bot.url("whatsapp"), notification(text_message("hello")))
    # Acknowledged with nothing run yet: the turn happens after the 200.
    assert status == 200
    assert await bot.store.inbox_depth() == 1 and platform_api.requests == []
    await bot.server.start()
    await bot.server.wait_for(lambda s: s.delivered == 1)
    (req,) = platform_api.requests
    assert req.path == f"/v21.0/{NUMBER}/messages"
    assert req.headers["Authorization"] == f"Bearer {ACCESS_TOKEN}"
    assert req.json()["to"] == "15551234567"
    assert req.json()["text"] == {"body": "You said: hello"}


async def test_get_verification_through_the_server(
    webhooks: Webhooks, client: aiohttp.ClientSession
) -> None:
    bot = await webhooks.start(platform())
    url = bot.url("whatsapp")
    query = {"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN, "hub.challenge": "42"}
    async with client.get(url, params=query) as resp:
        assert (resp.status, await resp.text()) == (200, "42")
    async with client.get(url, params=query | {"hub.verify_token": "guess"}) as resp:
        assert resp.status == 403


async def test_unsigned_tampered_or_redelivered_messages(
    webhooks: Webhooks,
    platform_api: PlatformAPI,
    client: aiohttp.ClientSession,
    runtime: Runtime,
) -> None:
    bot = await webhooks.start(platform(platform_api.url("")))
    url = bot.url("whatsapp")
    body = encode(notification(text_message("hello", "wamid.A")))
    assert await post(client, url, body, sig="sha256=" + "0" * 64) == 401
    # Another sender under the original signature: the sender is part of what is signed.
    forged = body.replace(b"15551234567", b"15550000000")
    assert await post(client, url, forged, sig=signature(body)) == 401
    assert bot.server.stats.rejected_signature == 2
    assert await bot.store.inbox_depth() == 0
    assert await post(client, url, body) == 200
    assert await post(client, url, body) == 200  # Meta redelivers the same wamid
    await bot.server.wait_for(lambda s: s.delivered == 1)
    assert bot.server.stats.duplicates == 1
    assert len(platform_api.requests) == 1
    assert await user_ids(runtime) == ["whatsapp:15551234567@s.whatsapp.net"]


async def test_user_id_comes_only_from_the_signed_sender(
    webhooks: Webhooks,
    platform_api: PlatformAPI,
    client: aiohttp.ClientSession,
    runtime: Runtime,
) -> None:
    bot = await webhooks.start(platform(platform_api.url("")))
    payload = notification(text_message("who am I", wa_id="4915112345678"))
    # Fields a sender might hope we read: none of them names the user.
    payload["user_id"] = "whatsapp:15550000001@s.whatsapp.net"
    payload["entry"][0]["changes"][0]["value"]["contacts"][0]["wa_id"] = "15550000001"
    status = await post(
        client,
        bot.url("whatsapp") + "?user_id=tui:local",
        payload,
        extra_headers={"X-User-Id": "tui:local"},
    )
    assert status == 200
    await bot.server.wait_for(lambda s: s.delivered == 1)
    assert await user_ids(runtime) == ["whatsapp:4915112345678@s.whatsapp.net"]
    assert platform_api.requests[0].json()["to"] == "4915112345678"


async def test_statuses_are_acknowledged_and_not_answered(
    webhooks: Webhooks, platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    bot = await webhooks.start(platform(platform_api.url("")))
    statuses = notification(statuses=[{"id": "wamid.out", "status": "read"}])
    assert await post(client, bot.url("whatsapp"), statuses) == 200
    assert await post(client, bot.url("whatsapp"), b"{broken") == 400
    assert bot.server.stats.accepted == 0 and await bot.store.inbox_depth() == 0


async def test_oversize_body_is_413(webhooks: Webhooks, client: aiohttp.ClientSession) -> None:
    bot = await webhooks.start(platform(), settings=WebhookSettings(max_body_bytes=1024))
    big = encode(notification(text_message("x" * 2000)))
    assert await post(client, bot.url("whatsapp"), big) == 413
    assert await bot.store.inbox_depth() == 0


async def test_purge_is_confirmed_with_a_signed_y(
    webhooks: Webhooks,
    platform_api: PlatformAPI,
    client: aiohttp.ClientSession,
    runtime: Runtime,
) -> None:
    bot = await webhooks.start(platform(platform_api.url("")))
    url = bot.url("whatsapp")

    def sent() -> list[str]:
        return [r.json()["text"]["body"] for r in platform_api.requests]

    assert await post(client, url, notification(text_message("my plan", "wamid.1"))) == 200
    await bot.server.wait_for(lambda s: s.delivered == 1)
    assert await post(client, url, notification(text_message("/purge user", "wamid.2"))) == 200
    await bot.server.wait_for(lambda s: s.delivered == 2)
    prompt = sent()[1]
    assert "1 session, 2 messages" in prompt and "y or n" in prompt
    assert await post(client, url, notification(text_message("y", "wamid.3"))) == 200
    await bot.server.wait_for(lambda s: s.delivered == 3)
    assert sent()[2].startswith("Deleted ") and "2 messages" in sent()[2]
    assert await runtime.db.fetchall("SELECT * FROM messages", ()) == []
