"""WhatsApp Cloud API: subscription check, signatures, parsing, Graph replies.

End to end through the webhook server: ``test_whatsapp_server.py``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request

from picobot.channels.webhook.base import DeliveryError, WebhookError
from picobot.channels.webhook.platforms.whatsapp import WhatsAppPlatform
from picobot.channels.webhook.signing import hmac_sha256_hex
from picobot.config.channels import WhatsAppSettings
from picobot.errors import ConfigError
from tests.channels.webhook.conftest import PlatformAPI

APP_SECRET = "wa-app-secret"
VERIFY_TOKEN = "wa-verify-token"
ACCESS_TOKEN = "EAAG-wa-access-token"
NUMBER = "106540352242922"


def platform(base_url: str = "http://127.0.0.1:1", **overrides: Any) -> WhatsAppPlatform:
    options: dict[str, Any] = {"phone_number_id": NUMBER, **overrides}
    settings = WhatsAppSettings(enabled=True, graph_base_url=base_url, **options)
    return WhatsAppPlatform(
        settings, verify_token=VERIFY_TOKEN, app_secret=APP_SECRET, access_token=ACCESS_TOKEN
    )


def text_message(
    text: str, msg_id: str = "wamid.1", wa_id: str = "15551234567", *, sent: float | None = None
) -> dict[str, Any]:
    """A text message as the Cloud API sends it, sent now unless ``sent`` says when."""
    return {
        "from": wa_id,
        "id": msg_id,
        "timestamp": str(int(time.time() if sent is None else sent)),
        "type": "text",
        "text": {"body": text},
    }


def notification(*messages: dict[str, Any], **value: Any) -> dict[str, Any]:
    """A Cloud API notification carrying ``messages`` (and other ``value`` fields)."""
    body: dict[str, Any] = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550001234", "phone_number_id": NUMBER},
        **value,
    }
    if messages:
        contacts = [{"profile": {"name": "Ann"}, "wa_id": m["from"]} for m in messages]
        body |= {"contacts": contacts, "messages": list(messages)}
    return {
        "object": "whatsapp_business_account",
        "entry": [{"id": "WABA", "changes": [{"field": "messages", "value": body}]}],
    }


def encode(payload: dict[str, Any] | bytes) -> bytes:
    return payload if isinstance(payload, bytes) else json.dumps(payload).encode()


def signature(body: bytes, secret: str = APP_SECRET) -> str:
    return "sha256=" + hmac_sha256_hex(secret, body)


def post_request(body: bytes, sig: str | None) -> Any:
    headers = {} if sig is None else {"X-Hub-Signature-256": sig}
    return make_mocked_request("POST", "/webhooks/whatsapp", headers=headers)


# Configuration -------------------------------------------------------------------


def test_from_settings_reads_the_named_env_vars(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = WhatsAppSettings(enabled=True, access_token_env="MY_WA_TOKEN")
    monkeypatch.setenv(settings.verify_token_env, VERIFY_TOKEN)
    monkeypatch.setenv(settings.app_secret_env, APP_SECRET)
    monkeypatch.delenv("MY_WA_TOKEN", raising=False)
    with pytest.raises(ConfigError) as info:
        WhatsAppPlatform.from_settings(settings)
    assert "MY_WA_TOKEN" in str(info.value) and "access_token_env" in str(info.value)
    monkeypatch.setenv("MY_WA_TOKEN", "   ")
    with pytest.raises(ConfigError, match="MY_WA_TOKEN"):
        WhatsAppPlatform.from_settings(settings)
    monkeypatch.setenv("MY_WA_TOKEN", ACCESS_TOKEN)
    wa = WhatsAppPlatform.from_settings(settings)
    assert wa.name == "whatsapp"
    body = encode(notification(text_message("hi")))
    wa.verify(post_request(body, signature(body)), body)


def test_blank_secret_is_refused() -> None:
    with pytest.raises(ConfigError, match="PICOBOT_WHATSAPP_APP_SECRET"):
        WhatsAppPlatform(WhatsAppSettings(), verify_token="t", app_secret=" ", access_token="a")


# Subscription check ----------------------------------------------------------------


def get_request(query: str) -> Any:
    return make_mocked_request("GET", f"/webhooks/whatsapp?{query}")


async def test_get_verification_echoes_the_challenge_only_for_the_right_token() -> None:
    wa = platform()
    ok = await wa.handshake(
        get_request(f"hub.mode=subscribe&hub.verify_token={VERIFY_TOKEN}&hub.challenge=1158201444"),
        b"",
    )
    assert ok is not None
    assert (ok.status, ok.text, ok.content_type) == (200, "1158201444", "text/plain")
    for query in (
        "hub.mode=subscribe&hub.verify_token=wrong&hub.challenge=1",
        "hub.mode=subscribe&hub.challenge=1",
        f"hub.mode=subscribe&hub.verify_token={VERIFY_TOKEN}x&hub.challenge=1",
    ):
        with pytest.raises(WebhookError) as info:
            await wa.handshake(get_request(query), b"")
        assert info.value.status == 403
    with pytest.raises(WebhookError) as info:
        await wa.handshake(
            get_request(f"hub.mode=unsubscribe&hub.verify_token={VERIFY_TOKEN}"), b""
        )
    assert info.value.status == 400
    # Not a subscription check: the core decides (405 for GET, verify+parse for POST).
    assert await wa.handshake(get_request("foo=bar"), b"") is None
    body = encode(notification(text_message("hi")))
    assert await wa.handshake(post_request(body, signature(body)), body) is None


# Signatures ----------------------------------------------------------------------


def test_verify_accepts_only_the_app_secrets_signature_of_the_exact_body() -> None:
    wa = platform()
    body = encode(notification(text_message("hi")))
    wa.verify(post_request(body, signature(body)), body)
    bad = [
        None,
        "",
        signature(body, "another-secret"),
        signature(body)[len("sha256=") :],  # no prefix
        signature(body + b" "),
        "sha1=" + hmac_sha256_hex(APP_SECRET, body),
    ]
    for sig in bad:
        with pytest.raises(WebhookError) as info:
            wa.verify(post_request(body, sig), body)
        assert info.value.status == 401, sig
    tampered = body.replace(b"15551234567", b"15559999999")
    with pytest.raises(WebhookError):
        wa.verify(post_request(tampered, signature(body)), tampered)


# Parsing -----------------------------------------------------------------------


def test_parse_text_message_builds_ids_from_the_sender() -> None:
    (msg,) = platform().parse(encode(notification(text_message("hello", "wamid.HBg="))))
    assert msg.message_id == "wamid.HBg="
    assert msg.user_id == "whatsapp:15551234567@s.whatsapp.net"
    assert (msg.chat_id, msg.sender, msg.text) == ("15551234567", "15551234567", "hello")
    assert msg.reply_to == {
        "to": "15551234567",
        "phone_number_id": NUMBER,
        "reply_to_message_id": "wamid.HBg=",
    }


def test_parse_skips_statuses_and_non_text_messages_and_keeps_order() -> None:
    wa = platform()
    statuses = notification(
        statuses=[{"id": "wamid.out", "status": "delivered", "recipient_id": "15551234567"}]
    )
    assert wa.parse(encode(statuses)) == []
    image = {"from": "15551234567", "id": "wamid.img", "type": "image", "image": {"id": "9"}}
    reaction = {"from": "15551234567", "id": "wamid.r", "type": "reaction", "reaction": {}}
    body = notification(
        text_message("one", "wamid.1"), image, reaction, text_message("two", "wamid.2", "4477")
    )
    found = wa.parse(encode(body))
    assert [(m.message_id, m.text, m.sender) for m in found] == [
        ("wamid.1", "one", "15551234567"),
        ("wamid.2", "two", "4477"),
    ]


def test_parse_skips_messages_for_another_configured_number() -> None:
    body = notification(text_message("hi"))
    body["entry"][0]["changes"][0]["value"]["metadata"]["phone_number_id"] = "999"
    assert platform().parse(encode(body)) == []
    # Without a configured number, the reply goes out from the number written to.
    (msg,) = platform(phone_number_id="").parse(encode(body))
    assert msg.reply_to["phone_number_id"] == "999"


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[1, 2]",
        b"\xff\xfe",
        json.dumps({"object": "page", "entry": []}).encode(),
        json.dumps({"object": "whatsapp_business_account", "entry": {"changes": []}}).encode(),
        json.dumps({"object": "whatsapp_business_account", "entry": ["x"]}).encode(),
        encode(notification({"from": "1555", "id": "w1", "type": "text"})),
        encode(notification({"from": "1555", "id": "w1", "type": "text", "text": {"body": 5}})),
        encode(notification(text_message("hi", wa_id="1555@evil"))),
        encode(notification(text_message("hi", wa_id=""))),
        encode(notification(text_message("hi", msg_id="has space"))),
    ],
)
def test_malformed_bodies_are_400(body: bytes) -> None:
    with pytest.raises(WebhookError) as info:
        platform().parse(body)
    assert info.value.status == 400


# Sending ------------------------------------------------------------------------


async def test_send_posts_a_text_message_with_the_access_token(
    platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    wa = platform(platform_api.url("/v21.0"))
    await wa.send(client, {"to": "15551234567", "phone_number_id": NUMBER}, "Hi there")
    (req,) = platform_api.requests
    assert (req.method, req.path) == ("POST", f"/v21.0/{NUMBER}/messages")
    assert req.headers["Authorization"] == f"Bearer {ACCESS_TOKEN}"
    assert req.headers["Content-Type"].startswith("application/json")
    assert req.json() == {
        "messaging_product": "whatsapp",
        "to": "15551234567",
        "type": "text",
        "text": {"body": "Hi there"},
    }


async def test_long_reply_is_split_in_order_within_the_limit(
    platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    wa = platform(platform_api.url(""))
    text = " ".join(f"w{i:05d}" for i in range(1500))  # ~10.5k characters
    await wa.send(client, {"to": "1555", "phone_number_id": NUMBER}, text)
    parts = [r.json()["text"]["body"] for r in platform_api.requests]
    assert len(parts) == 3
    assert all(len(p) <= 4096 for p in parts)
    assert " ".join(parts) == text


async def test_send_failures_are_classified(
    platform_api: PlatformAPI, client: aiohttp.ClientSession
) -> None:
    wa = platform(platform_api.url(""))
    reply_to = {"to": "1555", "phone_number_id": NUMBER}
    platform_api.reply(500, {"error": {"message": "oops", "code": 1}})
    with pytest.raises(DeliveryError) as info:
        await wa.send(client, reply_to, "x")
    assert info.value.retry is True
    platform_api.reply(400, {"error": {"message": "Recipient not allowed", "code": 131030}})
    with pytest.raises(DeliveryError) as info:
        await wa.send(client, reply_to, "x")
    assert info.value.retry is False
    assert "131030" in str(info.value) and "Recipient not allowed" in str(info.value)
    # Throughput limits come as HTTP 400 but pass with time.
    platform_api.reply(400, {"error": {"message": "Rate limit hit", "code": 130429}})
    with pytest.raises(DeliveryError) as info:
        await wa.send(client, reply_to, "x")
    assert info.value.retry is True
    platform_api.reply(429, {"error": {"code": 4}}, headers={"Retry-After": "7"})
    with pytest.raises(DeliveryError) as info:
        await wa.send(client, reply_to, "x")
    assert (info.value.retry, info.value.retry_after_secs) == (True, 7.0)
    platform_api.reply(401, {"error": {"message": f"bad token {ACCESS_TOKEN}", "code": 190}})
    with pytest.raises(DeliveryError) as info:
        await wa.send(client, reply_to, "x")
    assert info.value.retry is False
    assert ACCESS_TOKEN not in str(info.value)
    with pytest.raises(DeliveryError) as info:
        await platform("http://127.0.0.1:1").send(client, reply_to, "x")
    assert info.value.retry is True
    with pytest.raises(DeliveryError) as info:
        await platform(phone_number_id="").send(client, {"to": "1555"}, "x")
    assert info.value.retry is False
