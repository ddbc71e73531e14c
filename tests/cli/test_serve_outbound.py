"""``picobot serve`` with Telegram polling and Slack Socket Mode: no webhook route, both
chats answered, both connections on /metrics, recorded as stopped after a clean stop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from picobot.cli.serve import ServeInfo, serve
from picobot.cli.status import StoreStatus, read_status
from picobot.config.channels import (
    ChannelsSettings,
    ServerSettings,
    SlackSettings,
    TelegramSettings,
    WebhookSettings,
)
from picobot.config.settings import DataSettings, Settings
from picobot.llm.scripted import ScriptedProvider
from tests.channels.webhook.slack_socket_api import slack_socket_api
from tests.channels.webhook.telegram_api import telegram_api

TG_TOKEN = "777:serve-outbound-token-abcdef"
APP_TOKEN = "xapp-1-A0PICOBOT1-serve"
SLACK_BOT = "xoxb-serve-outbound"
ADMIN_KEY = "admin-key-outbound-0123456789"
WAIT = 30.0


async def test_serve_runs_both_outbound_connections_and_stops_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PICOBOT_TELEGRAM_BOT_TOKEN", TG_TOKEN)
    monkeypatch.setenv("PICOBOT_SLACK_APP_TOKEN", APP_TOKEN)
    monkeypatch.setenv("PICOBOT_SLACK_BOT_TOKEN", SLACK_BOT)
    monkeypatch.setenv("PICOBOT_ADMIN_API_KEYS", ADMIN_KEY)
    async with telegram_api(TG_TOKEN) as tg, slack_socket_api(APP_TOKEN, SLACK_BOT) as slack:
        hooks = WebhookSettings(
            telegram=TelegramSettings(
                enabled=True, mode="polling", api_base_url=tg.base_url, poll_timeout_secs=1
            ),
            slack=SlackSettings(enabled=True, mode="socket", api_base_url=slack.base_url),
        )
        settings = Settings(
            data=DataSettings(dir=str(tmp_path / "data")),
            server=ServerSettings(port=0),
            channels=ChannelsSettings(webhook=hooks),
        )
        stop = asyncio.Event()
        ready = asyncio.Event()
        infos: list[ServeInfo] = []

        def started(info: ServeInfo) -> None:
            infos.append(info)
            ready.set()

        task = asyncio.create_task(
            serve(settings, provider=ScriptedProvider(), stop=stop, ready=started)
        )
        try:
            await asyncio.wait_for(ready.wait(), WAIT)
            [info] = infos
            assert info.webhooks == []
            assert info.connections == ["telegram (polling)", "slack (socket)"]
            tg.push("hi from telegram", user=42, chat=42, message_id=1)
            await asyncio.wait_for(slack.wait(lambda a: a.hellos == 1), WAIT)
            await slack.send_event("hi from slack")
            await asyncio.wait_for(tg.wait(lambda a: len(a.sent) == 1), WAIT)
            await asyncio.wait_for(slack.wait(lambda a: len(a.posted) == 1), WAIT)
            assert tg.sent[0]["text"] == "You said: hi from telegram"
            assert slack.posted[0]["text"] == "You said: hi from slack"

            assert info.http_url is not None
            auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{info.http_url}/webhooks/telegram", json={}) as resp:
                    assert resp.status == 404  # polling: no webhook route to attack
                async with http.get(f"{info.http_url}/metrics", headers=auth) as resp:
                    metrics = await resp.text()
            for channel, mode in (("telegram", "polling"), ("slack", "socket")):
                labels = f'{{channel="{channel}",mode="{mode}"}}'
                assert f"picobot_channel_connected{labels} 1.0" in metrics
                assert f"picobot_channel_last_update_timestamp_seconds{labels}" in metrics
        finally:
            stop.set()
            assert await asyncio.wait_for(task, WAIT) == 0

    found = await read_status(settings)
    assert isinstance(found, StoreStatus)
    states = {(c.channel, c.mode, c.state) for c in found.connections}
    assert states == {("slack", "socket", "stopped"), ("telegram", "polling", "stopped")}
