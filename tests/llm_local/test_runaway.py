"""The local provider's generation settings and its stop on runaway repetition.

The llama object here is a stand-in that streams llama-cpp-python's chunk format (what
``Llama.create_chat_completion(stream=True)`` yields), so these tests need no model
and show exactly what the provider asks llama.cpp for and what it does with a loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("llama_cpp")

from picobot.config.settings import LLMSettings
from picobot.llm.base import ChatMessage, Finish, StreamEvent, TextDelta
from picobot.llm.local import REPETITION, LocalProvider, sampling

PIXEL = "Podra ajudar a Pixel como a Pixel como Pixel?"
PROMPT = [
    ChatMessage("user", "Hi! My name is Dana and I live in Lisbon. I have a cat called Pixel.")
]


class StreamingLlama:
    """Streams ``pieces`` as llama-cpp-python chat chunks and records the call."""

    def __init__(self, pieces: list[str], finish: str = "length") -> None:
        self.pieces = pieces
        self.finish = finish
        self.kwargs: dict[str, Any] = {}
        self.sent = 0
        self.closed = False

    def create_chat_completion(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.kwargs = kwargs
        return self._chunks()

    def _chunks(self) -> Iterator[dict[str, Any]]:
        try:
            yield {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
            for piece in self.pieces:
                self.sent += 1
                yield {
                    "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]
                }
            yield {"choices": [{"index": 0, "delta": {}, "finish_reason": self.finish}]}
        finally:
            self.closed = True

    def close(self) -> None:
        pass


def provider_with(llama: StreamingLlama, **settings: Any) -> LocalProvider:
    p = LocalProvider(LLMSettings(provider="local", **settings))
    p._llama = llama  # the model is "loaded": no GGUF file is read
    return p


async def run(p: LocalProvider) -> list[StreamEvent]:
    return await asyncio.wait_for(_drain(p), 10)


async def _drain(p: LocalProvider) -> list[StreamEvent]:
    return [event async for event in p.stream(PROMPT)]


def words_of(text: str) -> list[str]:
    """Text as a model streams it: one word (with its leading space) per token."""
    first, *rest = text.split(" ")
    return [first, *(f" {w}" for w in rest)]


async def test_a_looping_reply_is_stopped_trimmed_and_finishes_normally() -> None:
    looping = words_of("Olá Dana! " + " ".join([PIXEL] * 60))
    llama = StreamingLlama(looping)
    events = await run(provider_with(llama))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == f"Olá Dana! {PIXEL}"
    assert events[-1] == Finish(REPETITION)
    # Generation stopped soon after the third copy, far from max_tokens.
    assert llama.sent < len(looping) // 10
    assert llama.closed


async def test_without_the_guard_the_loop_runs_to_max_tokens() -> None:
    looping = words_of(" ".join([PIXEL] * 20))
    events = await run(provider_with(StreamingLlama(looping), stop_on_repetition=False))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == " ".join([PIXEL] * 20)
    assert events[-1] == Finish("length")


async def test_a_normal_reply_passes_whole_with_the_models_finish() -> None:
    reply = "Hello Dana! Lisbon is lovely, and Pixel is a great name for a cat. " * 1
    reply += "How can I help you today?"
    events = await run(provider_with(StreamingLlama(words_of(reply), finish="stop")))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == reply
    assert events[-1] == Finish("stop")


async def test_generation_uses_the_sampling_settings() -> None:
    llama = StreamingLlama(["Hi."], finish="stop")
    settings = {"repeat_penalty": 1.3, "top_p": 0.8, "top_k": 20, "min_p": 0.1, "seed": 42}
    await run(provider_with(llama, temperature=0.2, **settings))
    assert llama.kwargs["stream"] is True
    assert {k: llama.kwargs[k] for k in settings} == settings
    assert llama.kwargs["temperature"] == 0.2
    # max_tokens 0 (the default) is the local provider's own default reply length.
    assert llama.kwargs["max_tokens"] == 256


def test_defaults_suit_a_small_model() -> None:
    args = sampling(LLMSettings())
    assert args["repeat_penalty"] > 1.0
    assert args["top_p"] < 1.0
    assert args["max_tokens"] == 256
    assert args["temperature"] == 0.3
    assert args["seed"] is None  # -1: a fresh seed per reply
    assert sampling(LLMSettings(max_tokens=512))["max_tokens"] == 512


async def test_a_json_answer_is_held_to_its_schema_by_the_grammar_and_not_cut() -> None:
    # A list of facts repeats its keys by design: the repetition guard must not cut it.
    item = '{"subject": null, "category": "preference", "text": "likes tea", "replaces": false}'
    answer = "[" + ", ".join([item] * 6) + "]"
    llama = StreamingLlama(words_of(answer), finish="stop")
    schema = {"type": "array", "items": {"type": "object"}}
    done = await asyncio.wait_for(provider_with(llama).complete_json(PROMPT, schema), 10)
    assert done.text == answer
    assert llama.kwargs["response_format"] == {"type": "json_object", "schema": schema}
    assert llama.kwargs["max_tokens"] >= 768
    # Chat replies keep their settings: no grammar, the usual reply bound.
    chat = StreamingLlama(["Hello", " there"], finish="stop")
    await run(provider_with(chat))
    assert "response_format" not in chat.kwargs and chat.kwargs["max_tokens"] == 256


class CountingLlama(StreamingLlama):
    """Also tokenizes (one token a word) and notes what the provider said while reading."""

    provider: LocalProvider | None = None
    seen: tuple[int | None, bool] | None = None

    def tokenize(self, text: bytes, add_bos: bool = False) -> list[int]:
        return list(range(len(text.split())))

    def create_chat_completion(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        assert self.provider is not None
        self.seen = (self.provider.reading, self.provider.busy)
        return super().create_chat_completion(**kwargs)


async def test_while_it_reads_its_prompt_the_provider_says_how_long_it_is() -> None:
    llama = CountingLlama(["Hello", " Dana"], finish="stop")
    p = llama.provider = provider_with(llama)
    assert (p.reading, p.busy) == (None, False)
    await run(p)
    words = len(PROMPT[0].content.split())
    assert llama.seen == (words, True)  # asked before the first token: the prompt's size
    assert (p.reading, p.busy) == (None, False)  # done: nothing to say
