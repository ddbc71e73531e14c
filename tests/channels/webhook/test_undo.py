"""/undo on Telegram through a real webhook server on loopback: the question says the
platform's copy is the platform's, the answer y deletes what PicoBot stored of the last
exchange (the message, the reply, their webhook rows) and erases it from the files."""

from __future__ import annotations

import asyncio
import random

import aiohttp

from picobot.runtime import Runtime
from tests.channels.webhook.conftest import PlatformAPI, Webhooks, rows
from tests.channels.webhook.test_purge_answer import WAIT, poster, telegram_chat
from tests.privacy.test_erasure import new_marker, scan


async def test_undo_over_telegram_removes_what_picobot_stored(
    webhooks: Webhooks,
    runtime: Runtime,
    platform_api: PlatformAPI,
    client: aiohttp.ClientSession,
) -> None:
    rng = random.Random("undo-telegram")
    chat = telegram_chat(platform_api, rng)
    regret, kept = new_marker(rng), new_marker(rng)
    bot = await webhooks.start(chat.platform, max_attempts=3)
    send = poster(client, bot, chat)

    def sent() -> list[str]:
        return [chat.text_of(r) for r in platform_api.requests]

    await send(f"keep {kept} please")
    await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 1), WAIT)
    await send(f"oops {regret} please")
    await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 2), WAIT)
    await send("/undo")
    await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 3), WAIT)
    question = sent()[2]
    assert "the last exchange" in question and "2 messages" in question
    assert "Telegram keeps" in question and "y or n" in question
    await send("y")
    await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 4), WAIT)
    assert sent()[3].startswith("Deleted the last exchange")
    stored = [str(r[0]) for r in await rows(runtime, "SELECT picobot_open(content) FROM messages")]
    assert len(stored) == 2 and all(kept in m for m in stored)
    inbox = await rows(runtime, "SELECT picobot_open(text) FROM webhook_inbox")
    assert not [r for r in inbox if regret in str(r[0])]
    outbound = await rows(runtime, "SELECT picobot_open(text) FROM outbound_queue")
    assert not [r for r in outbound if regret in str(r[0])]
    # Kept text reads back above; in the files it is sealed, so no scan finds either.
    assert scan(runtime.db.path.parent, [regret]) == {}
