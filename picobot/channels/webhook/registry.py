"""The webhook platforms PicoBot knows: adding one is its module plus one line here.

Each platform reads its own section, ``[channels.webhook.<name>]`` (a field of
:class:`WebhookSettings` named like the platform), and is built only when that
section is enabled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from picobot.channels.webhook.base import Platform
from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.channels.webhook.platforms.slack import SlackPlatform
from picobot.channels.webhook.platforms.telegram import TelegramPlatform
from picobot.channels.webhook.platforms.whatsapp import WhatsAppPlatform
from picobot.config.channels import WebhookSettings
from picobot.errors import ConfigError
from picobot.registry import Registry

PlatformFactory = Callable[[Any], Platform]
"""Builds a platform from its ``[channels.webhook.<name>]`` section."""

PLATFORMS: Registry[PlatformFactory] = Registry("webhook platform", "[channels.webhook]")
PLATFORMS.add("whatsapp", WhatsAppPlatform.from_settings)
PLATFORMS.add("telegram", TelegramPlatform.from_settings)
PLATFORMS.add("slack", SlackPlatform.from_settings)
PLATFORMS.add("generic", GenericPlatform.from_settings)


def enabled_platforms(settings: WebhookSettings) -> list[Platform]:
    """Build every enabled platform; a missing secret is a ConfigError naming its env var."""
    platforms: list[Platform] = []
    for name, factory in PLATFORMS.items():
        section = getattr(settings, name, None)
        if section is None:  # a registration without its settings: a programming error
            raise ConfigError(f"webhook platform {name!r} has no [channels.webhook.{name}]")
        if section.enabled:
            platforms.append(factory(section))
    return platforms
