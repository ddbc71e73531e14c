"""/export on a messaging platform: the caller's data as a document in the chat.

Each test runs real webhook requests through the webhook server on loopback, the turn
through the real kernel and SQLite file, and the delivery through real HTTP calls to a
stand-in of the platform's API in its documented format (Telegram ``sendDocument``,
Slack's external upload, WhatsApp's media upload and document message).
"""

from __future__ import annotations

import asyncio
import random
import re
from pathlib import Path

import aiohttp
import pytest

from picobot.channels.webhook.base import PlatformMessage
from picobot.channels.webhook.platforms import telegram as telegram_module
from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.runtime import Runtime
from picobot.store.channels.webhooks import PURGED_USER, QueuedDocument, WebhookStore
from picobot.store.erasure.export_files import export_dir, new_export_file
from picobot.store.keys.sealed_files import MAGIC, KeyGone, clear_size, read_sealed
from tests.channels.webhook.conftest import (
    PlatformAPI,
    Running,
    Webhooks,
    message,
    post_generic,
    rows,
)
from tests.channels.webhook.document_chats import PLATFORMS, DocumentChat, document_chat
from tests.privacy.test_erasure import new_marker

WAIT = 30.0
EXPORT_NAME = re.compile(r"picobot-export-[0-9]{8}T[0-9]{6}Z\.jsonl")


async def settle(bot: Running, done: int) -> None:
    """Wait until ``done`` replies were delivered or given up on."""
    await asyncio.wait_for(
        bot.server.wait_for(lambda s: s.delivered + s.delivery_failures >= done), WAIT
    )


async def two_users_chat(
    chat: DocumentChat, client: aiohttp.ClientSession, bot: Running, rng: random.Random
) -> tuple[str, str]:
    """Alice and bob each say something with a marker, answered; the two markers."""
    alice, bob = new_marker(rng), new_marker(rng)
    await chat.say(client, bot, "alice", f"my locker code is {alice}")
    await chat.say(client, bot, "bob", f"my locker code is {bob}")
    await settle(bot, 2)
    return alice, bob


def exports(runtime: Runtime) -> list[Path]:
    """The export files on disk."""
    folder = export_dir(runtime.db.path.parent)
    return sorted(folder.iterdir()) if folder.is_dir() else []


@pytest.mark.parametrize("name", PLATFORMS)
async def test_export_arrives_as_a_document_of_the_callers_data_only_and_the_file_goes(
    name: str, webhooks: Webhooks, runtime: Runtime, client: aiohttp.ClientSession
) -> None:
    async with document_chat(name) as chat:
        bot = await webhooks.start(chat.platform)
        alice, bob = await two_users_chat(chat, client, bot, random.Random(name))
        await chat.say(client, bot, "alice", "/export")
        await settle(bot, 3)

        [document] = chat.received()
        assert chat.addressed() == [chat.chats["alice"]]
        assert EXPORT_NAME.fullmatch(document.filename)
        assert document.caption.startswith("Everything stored about you, as JSON Lines: 1 ")
        records = document.records()
        assert records[0]["type"] == "export_header"
        assert records[0]["user_id"] == chat.user_ids["alice"]
        assert alice.encode() in document.content and bob.encode() not in document.content
        assert chat.user_ids["bob"].encode() not in document.content
        assert next(r["content"] for r in records if r["type"] == "message").endswith(alice)
        # Delivered: the file is gone, and the queue keeps neither its name nor the caption.
        assert exports(runtime) == []
        assert await rows(
            runtime,
            "SELECT status, text, document FROM outbound_queue WHERE seq = 0"
            " AND user_id = ? ORDER BY id DESC LIMIT 1",
            chat.user_ids["alice"],
        ) == [("sent", "", None)]
        assert bot.server.stats.delivery_failures == 0
        if name == "slack":  # the bot token went to the Web API only, not the upload URL
            assert chat.api.upload_auth == [None]
        if name == "whatsapp":  # the one supported document type a text file fits
            assert [u.content_type for u in chat.api.media.values()] == ["text/plain"]


@pytest.mark.parametrize("name", PLATFORMS)
async def test_a_failed_upload_is_retried_with_the_same_file(
    name: str, webhooks: Webhooks, runtime: Runtime, client: aiohttp.ClientSession
) -> None:
    async with document_chat(name) as chat:
        bot = await webhooks.start(chat.platform)
        alice, _ = await two_users_chat(chat, client, bot, random.Random(f"retry-{name}"))
        chat.fail_uploads(2)
        await chat.say(client, bot, "alice", "/export")
        await settle(bot, 3)
        assert bot.server.stats.delivery_retries == 2
        [document] = chat.received()
        assert alice.encode() in document.content
        assert exports(runtime) == []


async def test_an_export_waiting_to_be_sent_is_sealed_with_the_users_key(
    webhooks: Webhooks, runtime: Runtime, client: aiohttp.ClientSession
) -> None:
    async with document_chat("telegram") as chat:
        # Slow retries: the file waits on disk while the test reads it.
        bot = await webhooks.start(chat.platform, backoff_base_secs=30, backoff_cap_secs=30)
        alice, bob = await two_users_chat(chat, client, bot, random.Random("sealed-export"))
        chat.fail_uploads(1)
        await chat.say(client, bot, "alice", "/export")
        await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivery_retries == 1), WAIT)
        [path] = exports(runtime)
        stored = path.read_bytes()
        assert stored.startswith(MAGIC)
        assert alice.encode() not in stored and chat.user_ids["alice"].encode() not in stored
        plain = read_sealed(path, runtime.db.sealer)
        assert alice.encode() in plain and bob.encode() not in plain
        assert clear_size(path) == len(plain)
        # A copy taken before the user's key is deleted (a purge) cannot be opened after.
        copy = path.with_name("copy-of-export")
        copy.write_bytes(stored)
        assert runtime.db.sealer.forget(chat.user_ids["alice"])
        with pytest.raises(KeyGone):
            read_sealed(copy, runtime.db.sealer)


@pytest.mark.parametrize("name", PLATFORMS)
async def test_a_document_given_up_on_is_deleted_like_any_reply_given_up_on(
    name: str, webhooks: Webhooks, runtime: Runtime, client: aiohttp.ClientSession
) -> None:
    async with document_chat(name) as chat:
        bot = await webhooks.start(chat.platform, max_attempts=3)
        await two_users_chat(chat, client, bot, random.Random(f"give-up-{name}"))
        chat.fail_uploads(3)
        await chat.say(client, bot, "alice", "/export")
        await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivery_failures == 1), WAIT)
        assert chat.received() == []
        assert exports(runtime) == []
        [(status, text, document, attempts)] = await rows(
            runtime,
            "SELECT status, picobot_open(text), document, attempts FROM outbound_queue"
            " WHERE status != 'sent'",
        )
        assert (status, document, attempts) == ("failed", None, 3)
        assert str(text).startswith("Everything stored about you")  # kept for the operator


async def test_an_export_over_the_platforms_limit_is_a_clear_message_and_no_file(
    webhooks: Webhooks,
    runtime: Runtime,
    client: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(telegram_module, "MAX_DOCUMENT_BYTES", 200)
    async with document_chat("telegram") as chat:
        bot = await webhooks.start(chat.platform)
        await two_users_chat(chat, client, bot, random.Random(7))
        await chat.say(client, bot, "alice", "/export")
        await settle(bot, 3)
        assert chat.received() == []
        answer = chat.texts()[-1]
        assert re.match(r"Your export is [0-9,]+ bytes, more than the 200 bytes a file", answer)
        assert "picobot export --user" in answer
        assert exports(runtime) == []


async def test_the_generic_webhook_answers_that_it_cannot_carry_the_file(
    webhooks: Webhooks,
    runtime: Runtime,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
) -> None:
    bot = await webhooks.start(generic)
    url = bot.url("generic")
    await post_generic(client, url, message("hello", "m1"))
    await post_generic(client, url, message("/export", "m2"))
    await settle(bot, 2)
    answer = platform_api.requests[-1].json()["text"]
    assert answer.startswith("This chat cannot receive files, so /export cannot send your data")
    assert "picobot export --user" in answer and "terminal UI" in answer
    assert not export_dir(runtime.db.path.parent).exists()


async def start_with_document(
    webhooks: Webhooks, runtime: Runtime, chat: DocumentChat, *, exists: bool, purged: bool
) -> tuple[Running, Path]:
    """A Telegram document reply to chat 5 naming an export file (on disk if ``exists``),
    then a text, answering a message that is gone (``purged``) or not; then the server."""
    store = WebhookStore(runtime.db)
    path = new_export_file(runtime.db.path.parent, "telegram:5", 0.0)
    if exists:
        path.write_text('{"type": "export_header"}\n', encoding="utf-8")
    else:
        path.unlink()
    msg = PlatformMessage("5:1", "telegram:5", "5", "5", "/export")
    inbox_id = await store.accept("telegram", msg)
    assert inbox_id is not None
    if purged:
        await store.delete_user("telegram:5")
    await store.mark_processed(
        inbox_id,
        [QueuedDocument("your data", path.name), "after the document"],
        platform="telegram",
        reply_to={"chat_id": 5},
        user_id="telegram:5",
        chat_id="5",
    )
    return await webhooks.start(chat.platform, store=store), path


async def test_a_queued_document_whose_file_is_gone_is_given_up_at_once(
    webhooks: Webhooks, runtime: Runtime
) -> None:
    # Retention deleted the file (older than a day), or it was deleted by hand.
    async with document_chat("telegram") as chat:
        bot, _ = await start_with_document(webhooks, runtime, chat, exists=False, purged=False)
        await settle(bot, 2)
        assert bot.server.stats.delivery_failures == 1
        assert chat.received() == [] and chat.texts() == ["after the document"]
        [(status, error)] = await rows(
            runtime, "SELECT status, last_error FROM outbound_queue WHERE seq = 0"
        )
        assert status == "failed" and "the export file is gone" in str(error)


async def test_a_document_of_a_user_purged_during_the_turn_is_never_sent(
    webhooks: Webhooks, runtime: Runtime
) -> None:
    # The inbox row is gone (purged while /export ran): the reply is queued without its
    # user, and its file must go nowhere.
    async with document_chat("telegram") as chat:
        bot, path = await start_with_document(webhooks, runtime, chat, exists=True, purged=True)
        [(owner,), _] = await rows(runtime, "SELECT user_id FROM outbound_queue ORDER BY seq")
        assert owner == PURGED_USER
        await settle(bot, 1)  # the text behind it went out: the document was dealt with
        assert chat.received() == [] and chat.texts() == ["after the document"]
        assert not path.exists()
        assert await rows(runtime, "SELECT * FROM outbound_queue") == []  # both forgotten
