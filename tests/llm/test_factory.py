"""The provider registry: ``[llm] provider`` names an entry; a new entry is usable at once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

import pytest

from picobot.config.settings import LLMSettings
from picobot.errors import ConfigError
from picobot.llm.base import LLMProvider
from picobot.llm.factory import PROVIDERS, build_provider
from picobot.llm.scripted import ScriptedProvider


@pytest.fixture
def fake_provider() -> Iterator[list[LLMSettings]]:
    """A provider named ``fake`` that records the settings it was built from."""
    built: list[LLMSettings] = []

    def factory(settings: LLMSettings) -> LLMProvider:
        built.append(settings)
        return ScriptedProvider()

    with PROVIDERS.added("fake", factory):
        yield built


def test_the_config_choices_are_the_registered_providers() -> None:
    choices = get_args(LLMSettings.model_fields["provider"].annotation)
    assert sorted(choices) == sorted(PROVIDERS.names())


def test_the_configured_provider_is_built() -> None:
    assert isinstance(build_provider(LLMSettings(provider="scripted")), ScriptedProvider)


def test_a_registered_provider_is_usable(fake_provider: list[LLMSettings]) -> None:
    # The config Literal refuses names it does not list; model_copy skips validation.
    settings = LLMSettings().model_copy(update={"provider": "fake"})
    assert isinstance(build_provider(settings), ScriptedProvider)
    assert fake_provider == [settings]


def test_an_unknown_provider_lists_the_known_ones() -> None:
    settings = LLMSettings().model_copy(update={"provider": "nope"})
    with pytest.raises(ConfigError) as caught:
        build_provider(settings)
    message = str(caught.value)
    assert "unknown LLM provider 'nope' ([llm] provider)" in message
    assert "known: anthropic, local, openai, scripted" in message
