"""The platform registry: a registered platform with an enabled section is built."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from picobot.channels.webhook.base import Platform
from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.channels.webhook.registry import PLATFORMS, enabled_platforms
from picobot.config.channels import GenericWebhookSettings, WebhookSettings
from picobot.errors import ConfigError

SECRET_ENV = "PICOBOT_TEST_FAKE_SECRET"


class WithFake(WebhookSettings):
    """The webhook settings plus the section of a platform named ``fake``."""

    fake: GenericWebhookSettings = GenericWebhookSettings(
        enabled=True, secret_env=SECRET_ENV, callback_url="http://127.0.0.1:9/"
    )


@pytest.fixture
def fake_platform(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[GenericWebhookSettings]]:
    monkeypatch.setenv(SECRET_ENV, "s" * 32)
    sections: list[GenericWebhookSettings] = []

    def factory(section: GenericWebhookSettings) -> Platform:
        sections.append(section)
        return GenericPlatform.from_settings(section)

    with PLATFORMS.added("fake", factory):
        yield sections


def test_the_known_platforms() -> None:
    assert PLATFORMS.names() == ["whatsapp", "telegram", "slack", "generic"]
    assert enabled_platforms(WebhookSettings()) == []


def test_a_registered_platform_is_built_from_its_section(
    fake_platform: list[GenericWebhookSettings],
) -> None:
    settings = WithFake()
    platforms = enabled_platforms(settings)
    assert [type(p) for p in platforms] == [GenericPlatform]
    assert fake_platform == [settings.fake]


def test_a_platform_without_a_section_is_named(
    fake_platform: list[GenericWebhookSettings],
) -> None:
    with pytest.raises(ConfigError, match=r"'fake' has no \[channels.webhook.fake\]"):
        enabled_platforms(WebhookSettings())


def test_an_unknown_platform_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        PLATFORMS.get("signal")
    assert "unknown webhook platform 'signal'" in str(caught.value)
    assert "known: generic, slack, telegram, whatsapp" in str(caught.value)
