"""The webhook platforms PicoBot knows: adding one is its module plus one line here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from picobot.channels.webhook.base import Platform
from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.channels.webhook.platforms.slack import SlackPlatform
from picobot.channels.webhook.platforms.telegram import TelegramPlatform
from picobot.channels.webhook.platforms.whatsapp import WhatsAppPlatform
from picobot.config.channels import WebhookSettings

# name -> (section of [channels.webhook], factory building the platform from it)
PLATFORMS: dict[str, Callable[[Any], Platform]] = {
    "whatsapp": WhatsAppPlatform.from_settings,
    "telegram": TelegramPlatform.from_settings,
    "slack": SlackPlatform.from_settings,
    "generic": GenericPlatform.from_settings,
}


def enabled_platforms(settings: WebhookSettings) -> list[Platform]:
    """Build every enabled platform; a missing secret is a ConfigError naming its env var."""
    platforms: list[Platform] = []
    for name, factory in PLATFORMS.items():
        section = getattr(settings, name)
        if section.enabled:
            platforms.append(factory(section))
    return platforms
