"""Pick the provider named by ``[llm] provider``."""

from __future__ import annotations

from picobot.config.settings import LLMSettings
from picobot.llm.base import LLMProvider


def build_provider(settings: LLMSettings) -> LLMProvider:
    """Build the configured provider; imports are lazy so unused backends cost nothing."""
    if settings.provider == "scripted":
        from picobot.llm.scripted import ScriptedProvider

        return ScriptedProvider()
    if settings.provider == "openai":
        from picobot.llm.openai import OpenAIProvider

        return OpenAIProvider.from_settings(settings)
    if settings.provider == "anthropic":
        from picobot.llm.anthropic import AnthropicProvider

        return AnthropicProvider.from_settings(settings)
    from picobot.llm.local import LocalProvider

    return LocalProvider(settings)
