"""How much of a session one extraction call may quote, by model."""

from __future__ import annotations

from picobot.config.model import LLMSettings
from picobot.tasks.learning import MAX_INPUT_TOKENS, PROMPT_OVERHEAD_TOKENS, extraction_input_tokens


def test_the_local_models_default_reply_length_is_kept_free() -> None:
    # max_tokens = 0 means the provider's default (256 for the local model): that much
    # of the window is the reply's, not the quoted messages'.
    llm = LLMSettings(provider="local", context_tokens=2048, max_tokens=0)
    assert extraction_input_tokens(llm) == 2048 - llm.reply_tokens - PROMPT_OVERHEAD_TOKENS
    assert llm.reply_tokens > 0


def test_remote_models_get_the_fixed_cap() -> None:
    assert extraction_input_tokens(LLMSettings(provider="openai")) == MAX_INPUT_TOKENS
