"""The LLM providers by name (``[llm] provider``), and building the configured one.

Adding a provider is its module plus one ``@PROVIDERS.register`` function here, which
imports the module only when chosen (unused backends cost nothing), and its name in
the ``[llm] provider`` choices of :class:`picobot.config.settings.LLMSettings` (the
config stays a validated Literal; a test keeps the two lists equal).
"""

from __future__ import annotations

from collections.abc import Callable

from picobot.config.settings import LLMSettings
from picobot.llm.base import LLMProvider
from picobot.registry import Registry

ProviderFactory = Callable[[LLMSettings], LLMProvider]
"""Builds a provider from ``[llm]``."""

PROVIDERS: Registry[ProviderFactory] = Registry("LLM provider", "[llm] provider")


@PROVIDERS.register("local")
def _local(settings: LLMSettings) -> LLMProvider:
    from picobot.llm.local import LocalProvider

    return LocalProvider(settings)


@PROVIDERS.register("openai")
def _openai(settings: LLMSettings) -> LLMProvider:
    from picobot.llm.openai import OpenAIProvider

    return OpenAIProvider.from_settings(settings)


@PROVIDERS.register("anthropic")
def _anthropic(settings: LLMSettings) -> LLMProvider:
    from picobot.llm.anthropic import AnthropicProvider

    return AnthropicProvider.from_settings(settings)


@PROVIDERS.register("scripted")
def _scripted(settings: LLMSettings) -> LLMProvider:
    from picobot.llm.scripted import ScriptedProvider

    return ScriptedProvider()


def build_provider(settings: LLMSettings) -> LLMProvider:
    """Build the provider ``settings.provider`` names; ConfigError listing the known ones."""
    return PROVIDERS.get(settings.provider)(settings)
