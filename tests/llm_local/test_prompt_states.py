"""Prompt states with the real bundled model: a conversation resumed after another one
continues from its kept state exactly as from a fresh read, and a purge drops them.

Greedy decoding, so the same prompt must give the same tokens whichever way the model
got its evaluated prefix.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

pytest.importorskip("llama_cpp")

from picobot.config.settings import LLMSettings
from picobot.llm.base import CONVERSATION, ChatMessage, TextDelta
from picobot.llm.llama_context import ChatLlama
from picobot.llm.local import LocalProvider, bundled_model_path
from picobot.llm.prompt_states import PromptStates

pytestmark = [pytest.mark.local_model, pytest.mark.asyncio(loop_scope="module")]

SETTINGS = LLMSettings(
    provider="local", temperature=0.0, max_tokens=12, context_tokens=2048, prompt_states=2
)
SYSTEM = ChatMessage("system", "You are PicoBot, a friendly assistant.")
TIMEOUT = 60.0


def conversation(topic: str, turns: int) -> list[ChatMessage]:
    """A few exchanges about ``topic``: enough tokens that reading them again shows."""
    out = [SYSTEM]
    for i in range(turns):
        out.append(ChatMessage("user", f"Tell me fact {i} about {topic}, in a few words."))
        out.append(ChatMessage("assistant", f"Fact {i}: {topic} is older than it looks."))
    return out


async def reply(provider: LocalProvider, messages: list[ChatMessage], key: str | None) -> str:
    """One whole reply, asked as conversation ``key``."""

    async def run() -> str:
        CONVERSATION.set(key)
        return "".join(
            [e.text async for e in provider.stream(messages) if isinstance(e, TextDelta)]
        )

    return await asyncio.wait_for(run(), TIMEOUT)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def keeping() -> AsyncIterator[LocalProvider]:
    p = LocalProvider(SETTINGS)
    yield p
    await p.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fresh() -> AsyncIterator[LocalProvider]:
    p = LocalProvider(SETTINGS.model_copy(update={"prompt_states": 0}))
    yield p
    await p.aclose()


async def test_a_resumed_conversation_continues_as_from_a_fresh_read(
    keeping: LocalProvider, fresh: LocalProvider
) -> None:
    tea = conversation("tea", 6)
    await reply(keeping, [*tea, ChatMessage("user", "And one more?")], "tea")
    # Another conversation replaces what the context holds.
    await reply(keeping, [*conversation("the moon", 6), ChatMessage("user", "Why?")], "moon")
    assert keeping.last_read is not None and not keeping.last_read.restored

    resumed = [*tea, ChatMessage("user", "And one more?"), ChatMessage("user", "Thanks!")]
    kept = await reply(keeping, resumed, "tea")
    read = keeping.last_read
    assert read is not None and read.restored
    assert read.evaluated_tokens < read.prompt_tokens // 4

    anew = await reply(fresh, resumed, None)
    assert fresh.last_read is not None and not fresh.last_read.restored
    assert fresh.last_read.evaluated_tokens > read.evaluated_tokens
    assert kept == anew and kept


async def test_forgetting_drops_every_state_and_the_next_read_starts_over(
    keeping: LocalProvider,
) -> None:
    tea = [*conversation("tea", 6), ChatMessage("user", "A last one?")]
    await reply(keeping, tea, "tea")
    await reply(keeping, [*conversation("rain", 6), ChatMessage("user", "Why?")], "rain")
    assert keeping.forget_prompts() == 2
    assert keeping.forget_prompts() == 0
    await reply(keeping, [*tea, ChatMessage("user", "Bye!")], "tea")
    read = keeping.last_read
    assert read is not None and not read.restored
    assert read.evaluated_tokens > read.prompt_tokens // 2


async def test_a_state_read_before_a_clear_is_not_kept() -> None:
    states = PromptStates(2)
    llama = ChatLlama(model_path=str(bundled_model_path()), n_ctx=512, verbose=False)
    try:
        tokens = llama.tokenize(b"My PIN is 4321 and my cat is called Pixel.", add_bos=False)
        states.prepare(llama, tokens)
        llama.eval(tokens)
        states.clear()  # a purge while the prompt was being read
        states.keep(llama, "a")
        assert len(states) == 0
        states.prepare(llama, tokens)
        states.keep(llama, "a")
        assert len(states) == 1 and states.size_bytes > 0
    finally:
        llama.close()


async def test_one_state_per_conversation_and_the_least_recently_used_go_first() -> None:
    states = PromptStates(2)
    llama = ChatLlama(model_path=str(bundled_model_path()), n_ctx=512, verbose=False)
    try:

        def tokens(text: str) -> list[int]:
            return [int(t) for t in llama.tokenize(text.encode(), add_bos=False)]

        def read(text: str, key: str) -> None:
            states.prepare(llama, tokens(text))
            llama.eval(tokens(text))
            states.keep(llama, key)
            llama.reset()

        apples, pears, plums = ("apple " * 40, "pear " * 40, "plum " * 40)
        read(apples, "a")
        read(apples + "and more apples", "a")  # a's next turn replaces its last
        assert len(states) == 1
        read(pears, "b")
        read(plums, "c")  # over capacity: a, the least recently used, goes
        assert len(states) == 2
        assert not states.prepare(llama, tokens(apples + "again")).restored
        llama.reset()
        assert states.prepare(llama, tokens(pears + "again")).restored
        with pytest.raises(ValueError, match="at least 1"):
            PromptStates(0)
    finally:
        llama.close()
