"""Fuzzing the webhook parsers and the webhook HTTP endpoint.

Real: every platform module's own ``parse``; for the endpoint, the webhook core and all
four platforms mounted on a real aiohttp server on 127.0.0.1, the real aiohttp client,
a real runtime over a SQLite file (the workers are not started, so nothing is sent
anywhere). Generated: the bodies, headers, query strings and whether the request is
correctly signed (a correct signature is needed to reach ``parse`` over HTTP).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st

from picobot.channels.webhook.base import Platform, PlatformMessage, WebhookError
from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.channels.webhook.server import WebhookServer
from picobot.config.channels import (
    GenericWebhookSettings,
    SlackSettings,
    TelegramSettings,
    WebhookSettings,
    WhatsAppSettings,
)
from picobot.config.settings import DataSettings, Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.runtime import open_runtime
from picobot.store.channels.webhooks import WebhookStore
from tests.channels.webhook.generic_client import signed_headers

from .strategies import FUZZ, FUZZ_SHARED_FIXTURE, SURROGATES_FIXED, bodies, weighted

pytestmark = pytest.mark.usefixtures("hypothesis_home")

NOWHERE = "http://127.0.0.1:9"  # discard port: nothing may leave this machine
GENERIC_SECRET = "fuzz-generic-secret"
WA_APP_SECRET = "fuzz-whatsapp-app-secret"
WA_VERIFY = "fuzz-whatsapp-verify-token"
TG_SECRET = "fuzz-telegram-secret"
SLACK_SECRET = "fuzz-slack-signing-secret"
PLATFORMS = ("generic", "whatsapp", "telegram", "slack")
USER_PREFIX = {
    "generic": "generic:",
    "whatsapp": "whatsapp:",
    "telegram": "telegram:",
    "slack": "slack:",
}
MAX_BODY = 2048


def _hex(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def build(name: str) -> tuple[Platform, Callable[[bytes], dict[str, str]]]:
    """The platform ``name`` and a function giving the headers that sign a body for it.

    The platform modules other than generic are imported here, so that a test of a
    missing one is skipped rather than the whole file failing to import.
    """
    if name == "generic":
        generic = GenericPlatform(
            GenericWebhookSettings(enabled=True, callback_url=NOWHERE), GENERIC_SECRET
        )
        return generic, lambda body: signed_headers(body, secret=GENERIC_SECRET)
    if name == "whatsapp":
        wa = pytest.importorskip("picobot.channels.webhook.platforms.whatsapp")
        platform = wa.WhatsAppPlatform(
            WhatsAppSettings(enabled=True, graph_base_url=NOWHERE),
            verify_token=WA_VERIFY,
            app_secret=WA_APP_SECRET,
            access_token="fuzz-whatsapp-access-token",
        )
        return platform, lambda body: {wa.SIGNATURE_HEADER: "sha256=" + _hex(WA_APP_SECRET, body)}
    if name == "telegram":
        tg = pytest.importorskip("picobot.channels.webhook.platforms.telegram")
        platform = tg.TelegramPlatform(
            TelegramSettings(enabled=True, api_base_url=NOWHERE),
            secret_token=TG_SECRET,
            bot_token="123:fuzz-bot-token",
        )
        return platform, lambda body: {tg.SECRET_HEADER: TG_SECRET}
    slack = pytest.importorskip("picobot.channels.webhook.platforms.slack")
    platform = slack.SlackPlatform(
        SlackSettings(enabled=True, api_base_url=NOWHERE),
        signing_secret=SLACK_SECRET,
        bot_token="xoxb-fuzz",
    )

    def slack_headers(body: bytes) -> dict[str, str]:
        stamp = str(int(time.time()))
        base = b"v0:" + stamp.encode() + b":" + body
        return {
            slack.TIMESTAMP_HEADER: stamp,
            slack.SIGNATURE_HEADER: "v0=" + _hex(SLACK_SECRET, base),
        }

    return platform, slack_headers


def check_parsed(name: str, messages: object) -> None:
    """What a successful parse must look like: storable, well-formed messages."""
    assert isinstance(messages, list)
    for msg in messages:
        assert isinstance(msg, PlatformMessage)
        for value in (msg.message_id, msg.user_id, msg.chat_id, msg.sender, msg.text):
            assert isinstance(value, str) and value
        assert msg.text.strip()
        assert msg.user_id.startswith(USER_PREFIX[name])
        json.dumps(msg.reply_to)


@pytest.mark.parametrize("name", PLATFORMS)
@FUZZ
@given(data=st.data())
def test_parse_raises_only_webhook_errors_4xx(name: str, data: st.DataObject) -> None:
    platform, _ = build(name)
    body = data.draw(bodies(name), label="body")
    try:
        messages = platform.parse(body)
    except WebhookError as exc:
        assert 400 <= exc.status < 500
        assert exc.reason
        return
    check_parsed(name, messages)


@dataclass
class Endpoint:
    """All platforms on one loopback server, a client, and each platform's signer."""

    http: aiohttp.ClientSession
    base_url: str
    signers: dict[str, Callable[[bytes], dict[str, str]]]


@pytest.fixture
async def endpoint(tmp_path: Path) -> AsyncIterator[Endpoint]:
    built = {}
    for name in PLATFORMS:
        try:
            built[name] = build(name)
        except pytest.skip.Exception:
            continue
    settings = Settings(data=DataSettings(dir=str(tmp_path / "data")))
    async with open_runtime(settings, provider=ScriptedProvider()) as rt:
        hooks = WebhookServer(
            rt.kernel,
            [platform for platform, _ in built.values()],
            WebhookSettings(max_body_bytes=MAX_BODY),
            store=WebhookStore(rt.db),
            max_attempts=1,
            supervisor=rt.tasks,
        )
        app = web.Application(client_max_size=MAX_BODY)
        hooks.add_routes(app)
        server = TestServer(app, host="127.0.0.1", port=0)
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as http:
                signers = {name: signer for name, (_, signer) in built.items()}
                yield Endpoint(http, str(server.make_url("")).rstrip("/"), signers)
        finally:
            await server.close()
            await hooks.close()


_printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
_header_names = st.one_of(
    st.sampled_from(
        [
            "Content-Type",
            "X-PicoBot-Signature",
            "X-Hub-Signature-256",
            "X-Telegram-Bot-Api-Secret-Token",
            "X-Slack-Signature",
            "X-Slack-Request-Timestamp",
            "Authorization",
        ]
    ),
    st.from_regex(r"X-[A-Za-z0-9-]{1,12}", fullmatch=True),
)
_query = st.dictionaries(
    st.sampled_from(["hub.mode", "hub.challenge", "hub.verify_token", "x"]),
    st.one_of(st.sampled_from(["subscribe", WA_VERIFY, "", "c" * 300]), _printable),
    max_size=3,
)


@FUZZ_SHARED_FIXTURE
@given(data=st.data())
async def test_endpoint_never_answers_5xx(endpoint: Endpoint, data: st.DataObject) -> None:
    names = sorted(endpoint.signers)
    name = data.draw(weighted(*((1, st.just(n)) for n in names)), label="platform")
    method = data.draw(
        weighted((8, st.just("POST")), (1, st.just("GET")), (1, st.just("PUT"))), label="method"
    )
    oversized = st.binary(min_size=MAX_BODY - 8, max_size=MAX_BODY + 64)
    body = data.draw(weighted((9, bodies(name)), (1, oversized)), label="body")
    headers = data.draw(st.dictionaries(_header_names, _printable, max_size=4), label="headers")
    signed = data.draw(st.integers(min_value=0, max_value=3), label="signed") > 0
    if signed:
        headers.update(endpoint.signers[name](body))
    params = data.draw(_query, label="query")
    url = f"{endpoint.base_url}/webhooks/{name}"
    async with endpoint.http.request(
        method, url, data=body, headers=headers, params=params
    ) as resp:
        await resp.read()
        assert resp.status < 500, (resp.status, name, method, body, headers, params)
        if method == "POST" and not signed:
            # Deny by default: nothing unsigned is ever accepted.
            assert 400 <= resp.status < 500, (resp.status, name, body, headers)


# Lone surrogates: ``"\ud800"`` is valid JSON, and json.loads turns it into a str that
# cannot be encoded as UTF-8, so SQLite's binding raises UnicodeEncodeError when the
# inbox stores it. Today that escapes the webhook core as HTTP 500 (the platform then
# redelivers the poison message again and again). Fuzzers skip surrogates until then.
surrogate_bug = pytest.mark.xfail(
    not SURROGATES_FIXED,
    reason="lone surrogates reach SQLite: webhook answers 500 (see report)",
    strict=True,
)


@surrogate_bug
async def test_signed_webhook_with_a_lone_surrogate_is_a_4xx(endpoint: Endpoint) -> None:
    for field in ("text", "user", "message_id"):
        payload = {"user": "u", "chat": "c", "text": "hi", "message_id": f"m-{field}"}
        payload[field] += "\ud800"
        body = json.dumps(payload).encode()
        headers = endpoint.signers["generic"](body)
        url = f"{endpoint.base_url}/webhooks/generic"
        async with endpoint.http.post(url, data=body, headers=headers) as resp:
            assert resp.status == 400, field
