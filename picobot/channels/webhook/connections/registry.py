"""Which platform modes are outbound connections, and building them.

A platform whose section picks an outbound mode (``mode = "polling"`` for Telegram,
``mode = "socket"`` for Slack) gets a connection here and no webhook route; adding one
is its module plus one line in :data:`OUTBOUND_MODES`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from picobot.channels.webhook.base import Platform
from picobot.channels.webhook.connections.base import Connection, Sink
from picobot.channels.webhook.connections.slack_socket import SlackSocket
from picobot.channels.webhook.connections.telegram_polling import TelegramPoller
from picobot.store.channels.channel_state import ChannelState

ConnectionFactory = Callable[[Any, Sink, ChannelState], Connection]
"""Builds a connection from its platform, the sink of its messages and the store."""

OUTBOUND_MODES: dict[tuple[str, str], ConnectionFactory] = {
    ("telegram", "polling"): TelegramPoller,
    ("slack", "socket"): SlackSocket,
}
"""(platform name, mode) -> the connection that serves it."""


def _mode(platform: Platform) -> str:
    settings = getattr(platform, "settings", None)
    return str(getattr(settings, "mode", "webhook"))


def is_outbound(platform: Platform) -> bool:
    """Whether ``platform`` fetches its messages over a connection of ours."""
    return (platform.name, _mode(platform)) in OUTBOUND_MODES


def routed(platforms: Sequence[Platform]) -> list[str]:
    """The names of the platforms that receive webhooks."""
    return [p.name for p in platforms if not is_outbound(p)]


def outbound_connections(
    platforms: Sequence[Platform], sink: Sink, state: ChannelState
) -> list[Connection]:
    """A connection for every platform in an outbound mode."""
    return [OUTBOUND_MODES[(p.name, _mode(p))](p, sink, state) for p in platforms if is_outbound(p)]
