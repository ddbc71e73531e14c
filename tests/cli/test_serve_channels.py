"""The channel registry of ``picobot serve``: a registered channel is started and stopped."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from picobot.cli.serve import CHANNELS, ServeInfo, Stop, serve
from picobot.config.settings import DataSettings, Settings
from picobot.errors import ConfigError
from picobot.llm.scripted import ScriptedProvider
from picobot.runtime import Runtime


@pytest.fixture
def fake_channel() -> Iterator[list[str]]:
    """A channel named ``fake`` that records its start and stop."""
    events: list[str] = []

    async def start(rt: Runtime, stops: list[Stop], info: ServeInfo) -> None:
        events.append(f"start {rt.settings.llm.provider}")

        async def stop() -> None:
            events.append("stop")

        stops.append(stop)

    with CHANNELS.added("fake", start):
        yield events


def test_serve_starts_websocket_then_http_then_mcp_then_openai() -> None:
    assert CHANNELS.names() == ["websocket", "http", "mcp", "openai"]


async def test_a_registered_channel_is_started_and_stopped(
    tmp_path: Path, fake_channel: list[str]
) -> None:
    stop = asyncio.Event()
    settings = Settings(data=DataSettings(dir=str(tmp_path)))
    settings.llm.provider = "scripted"

    def ready(info: ServeInfo) -> None:
        fake_channel.append("ready")
        stop.set()

    assert await serve(settings, provider=ScriptedProvider(), stop=stop, ready=ready) == 0
    assert fake_channel == ["start scripted", "ready", "stop"]


def test_an_unknown_channel_lists_the_known_ones() -> None:
    with pytest.raises(
        ConfigError, match="unknown channel 'irc'; known: http, mcp, openai, websocket"
    ):
        CHANNELS.get("irc")
