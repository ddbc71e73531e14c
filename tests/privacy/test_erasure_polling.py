"""Erasure with Telegram long polling: a purged user leaves no byte behind, the offset and
connection rows never held any, and the update fetched again is not stored again."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from picobot.backoff import Backoff
from picobot.channels.webhook.connections.base import OutboundConnections
from picobot.channels.webhook.connections.telegram_polling import TelegramPoller
from picobot.channels.webhook.platforms.telegram import TelegramPlatform
from picobot.config.channels import TelegramSettings
from picobot.config.settings import DataSettings, Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.runtime import open_runtime
from picobot.store.channels.channel_state import ChannelState
from picobot.store.erasure.erase import erase_residue
from picobot.store.erasure.purge import PurgeStore
from tests.channels.webhook.conftest import Webhooks, rows
from tests.channels.webhook.telegram_api import telegram_api
from tests.privacy.test_erasure import new_marker, scan

TOKEN = "99:erasure-polling-token-0123456789"
USER = 8080808
WAIT = 20.0


async def test_purged_polled_user_leaves_no_byte_and_no_replay(tmp_path: Path) -> None:
    said = new_marker(random.Random(20261125))
    settings = Settings(data=DataSettings(dir=str(tmp_path / "data")))
    async with (
        telegram_api(TOKEN) as api,
        open_runtime(settings, provider=ScriptedProvider()) as rt,
    ):
        platform = TelegramPlatform(
            TelegramSettings(
                enabled=True, mode="polling", api_base_url=api.base_url, poll_timeout_secs=1
            ),
            secret_token=None,
            bot_token=TOKEN,
        )
        hooks = Webhooks(rt)
        bot = await hooks.start(platform)
        poller = TelegramPoller(
            platform, bot.server, ChannelState(rt.db), backoff=Backoff(0.01, 0.05)
        )
        owner = OutboundConnections([poller], rt.tasks)
        owner.start()
        try:
            api.push(f"remember {said}", user=USER, chat=USER, message_id=77)
            await asyncio.wait_for(bot.server.wait_for(lambda s: s.delivered == 1), WAIT)

            # The offset and status rows name no user and hold no text.
            state = await rows(rt, "SELECT * FROM channel_offsets")
            state += await rows(rt, "SELECT * FROM channel_connections")
            assert state and not any(str(USER) in str(row) for row in state)

            counts = await PurgeStore(rt.db).delete_user(f"telegram:{USER}")
            assert counts.webhook_rows == 2  # the message and its reply
            await erase_residue(rt.db)
            assert scan(rt.db.path.parent, [said]) == {}

            # Telegram sends the same message again (a new update): a duplicate.
            api.push(f"remember {said}", user=USER, chat=USER, message_id=77)
            await asyncio.wait_for(bot.server.wait_for(lambda s: s.duplicates == 1), WAIT)
            await rt.db.checkpoint()
            assert scan(rt.db.path.parent, [said]) == {}
            assert await rows(rt, "SELECT * FROM messages") == []
        finally:
            await owner.stop()
            await hooks.stop_all()
