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


def build_background_provider(settings: LLMSettings, chat: LLMProvider) -> LLMProvider:
    """The provider of summaries, extraction, reflections and digests.

    ``[llm.background]`` naming a provider builds that one. Otherwise it is the chat
    model, except that a local chat model gets a second instance of itself: its own
    llama.cpp context (the weights are memory-mapped, so the file is not read twice),
    so that background work neither waits for the chat's context nor evicts the chat's
    cached prompt from it. The caller closes what this returns when it is not ``chat``.
    """
    resolved = settings.for_background()
    if resolved is not None:
        return build_provider(resolved)
    second = getattr(chat, "second_context", None)
    return second() if second is not None else chat
