"""OpenAIProvider against a real local server speaking the Chat Completions wire format."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from picobot.backoff import parse_retry_after
from picobot.config.settings import LLMSettings
from picobot.errors import ConfigError, LLMError
from picobot.llm.base import (
    ChatMessage,
    Completion,
    Finish,
    LLMProvider,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCalls,
    ToolSpec,
    collect,
)
from picobot.llm.openai import DEFAULT_OPENAI_MODEL, OpenAIProvider
from picobot.llm.retry import RetryPolicy
from picobot.llm.sse import SSEEvent, SSEParser
from tests.scrape import metric_value

from .conftest import HELLO, WEATHER, FakeLLMServer

KEY = "sk-test-0123456789abcdef"

MakeProvider = Callable[..., OpenAIProvider]


def chunk(
    delta: dict[str, Any], finish: str | None = None, model: str = "test-model"
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` as OpenAI sends it."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def text_stream(*pieces: str) -> list[dict[str, Any] | str]:
    """A whole streamed text reply: role chunk, content chunks, finish chunk, [DONE]."""
    events: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": p}) for p in pieces]
    events += [chunk({}, "stop"), "[DONE]"]
    return events


def completion(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    """A non-streamed ``chat.completion``."""
    return {
        "id": "chatcmpl-2",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


@pytest.fixture
async def make_provider(llm_server: FakeLLMServer) -> AsyncIterator[MakeProvider]:
    """Build providers aimed at the fake server with tiny timeouts and backoff."""
    made: list[OpenAIProvider] = []

    def make(api_key: str | None = KEY, **overrides: Any) -> OpenAIProvider:
        fields: dict[str, Any] = {
            "provider": "openai",
            "model": "test-model",
            "base_url": llm_server.base_url,
            "timeout_secs": 2.0,
            "max_retries": 2,
            "temperature": 0.2,
            "max_tokens": 64,
        }
        backoff_base = overrides.pop("backoff_base", 0.01)
        max_backoff = overrides.pop("max_backoff", 0.05)
        provider = OpenAIProvider(
            LLMSettings(**(fields | overrides)),
            api_key=api_key,
            backoff_base=backoff_base,
            max_backoff=max_backoff,
        )
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


async def events_of(provider: OpenAIProvider, *args: Any) -> list[StreamEvent]:
    return [event async for event in provider.stream(*args)]


def text_of(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


# Streaming -------------------------------------------------------------------------


async def test_streams_text_and_sends_the_right_request(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(llm_server.sse(text_stream("Hello", ", ", "world!")))
    provider = make_provider()

    events = await events_of(provider, HELLO)

    assert events == [TextDelta("Hello"), TextDelta(", "), TextDelta("world!"), Finish("stop")]
    [request] = llm_server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert request.headers["Content-Type"].startswith("application/json")
    assert request.body == {
        "model": "test-model",
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi there"},
        ],
        "temperature": 0.2,
        "max_tokens": 64,
        "stream": True,
    }


async def test_stream_survives_chunk_boundaries_anywhere(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    # 1-byte writes split "\r\n" pairs and multi-byte UTF-8 characters across reads.
    pieces = ("Grüße ", "aus ", "東京 🗼", " \u2028 done")
    llm_server.reply(llm_server.sse(text_stream(*pieces), split=1, line_end="\r\n"))

    events = await events_of(make_provider(), HELLO)

    assert text_of(events) == "".join(pieces)
    assert events[-1] == Finish("stop")


async def test_streamed_tool_calls_are_reassembled_from_fragments(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    def frag(index: int, **fields: Any) -> dict[str, Any]:
        return chunk({"tool_calls": [{"index": index, **fields}]})

    llm_server.reply(
        llm_server.sse(
            [
                chunk({"role": "assistant", "content": None}),
                frag(
                    0,
                    id="call_a",
                    type="function",
                    function={"name": "get_weather", "arguments": ""},
                ),
                frag(0, function={"arguments": '{"ci'}),
                frag(0, function={"arguments": 'ty": "Par'}),
                frag(
                    1,
                    id="call_b",
                    type="function",
                    function={"name": "get_weather", "arguments": ""},
                ),
                frag(0, function={"arguments": 'is"}'}),
                frag(1, function={"arguments": '{"city": "Oslo"}'}),
                chunk({}, "tool_calls"),
                "[DONE]",
            ]
        )
    )

    events = await events_of(make_provider(), HELLO, [WEATHER])

    assert events == [
        ToolCalls(
            (
                ToolCall("call_a", "get_weather", '{"city": "Paris"}'),
                ToolCall("call_b", "get_weather", '{"city": "Oslo"}'),
            )
        ),
        Finish("tool_calls"),
    ]
    assert llm_server.requests[0].body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER.parameters,
            },
        }
    ]


async def test_tool_round_trip_messages_use_the_wire_shape(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(llm_server.sse(text_stream("It is sunny.")))
    call = ToolCall("call_a", "get_weather", '{"city": "Paris"}')
    messages = [
        *HELLO,
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage("tool", '{"sky": "clear"}', tool_call_id="call_a"),
    ]

    await events_of(make_provider(), messages, [ToolSpec("noargs", "No parameters.")])

    body = llm_server.requests[0].body
    assert body["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": '{"sky": "clear"}'},
    ]
    assert body["tools"][0]["function"]["parameters"] == {"type": "object", "properties": {}}


async def test_error_chunk_inside_the_stream_is_an_llm_error(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(llm_server.sse([{"error": {"message": "model crashed"}}]))
    with pytest.raises(LLMError, match="model crashed"):
        await events_of(make_provider(), HELLO)
    assert len(llm_server.requests) == 1


async def test_consumer_may_stop_early(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(llm_server.sse(text_stream(*["x"] * 50)))
    stream = make_provider().stream(HELLO)
    first = await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    assert first == TextDelta("x")


# Non-streaming ---------------------------------------------------------------------


async def test_complete_reads_a_whole_reply(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(llm_server.json_reply(completion({"role": "assistant", "content": "Hi!"})))
    provider = make_provider()

    result = await provider.complete(HELLO)

    assert result == Completion("Hi!", (), "stop")
    assert llm_server.requests[0].body["stream"] is False


async def test_complete_returns_tool_calls(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_z",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
            }
        ],
    }
    llm_server.reply(llm_server.json_reply(completion(message, "tool_calls")))

    result = await make_provider().complete(HELLO, [WEATHER])

    assert result == Completion(
        "", (ToolCall("call_z", "get_weather", '{"city": "Rome"}'),), "tool_calls"
    )
    assert llm_server.requests[0].body["tools"][0]["function"]["name"] == "get_weather"


# Retries, timeouts, errors ----------------------------------------------------------


async def test_429_is_retried_honouring_a_capped_retry_after(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    limited = {"error": {"message": "Rate limit reached", "type": "requests"}}
    llm_server.reply(
        llm_server.json_reply(limited, status=429, headers={"Retry-After": "5"}),
        llm_server.sse(text_stream("ok")),
    )
    provider = make_provider(backoff_base=0.001, max_backoff=0.3)

    started = time.monotonic()
    events = await events_of(provider, HELLO)
    elapsed = time.monotonic() - started

    assert text_of(events) == "ok"
    assert len(llm_server.requests) == 2
    # Waited for Retry-After rather than the 1 ms backoff, but only up to the cap.
    assert 0.3 <= elapsed < 2.0


async def test_5xx_is_retried_then_succeeds_for_complete(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(
        llm_server.json_reply({"error": {"message": "overloaded"}}, status=503),
        llm_server.json_reply({"error": {"message": "bad gateway"}}, status=502),
        llm_server.json_reply(completion({"role": "assistant", "content": "fine"})),
    )
    result = await make_provider().complete(HELLO)
    assert result.text == "fine"
    assert len(llm_server.requests) == 3


@pytest.mark.parametrize("streaming", [True, False])
async def test_persistent_500_gives_up_after_max_retries(
    llm_server: FakeLLMServer, make_provider: MakeProvider, streaming: bool
) -> None:
    llm_server.reply(llm_server.json_reply({"error": {"message": "boom"}}, status=500))
    provider = make_provider(max_retries=3)

    with pytest.raises(LLMError, match=r"HTTP 500: boom.*4 attempts"):
        if streaming:
            await events_of(provider, HELLO)
        else:
            await provider.complete(HELLO)
    assert len(llm_server.requests) == 4


@pytest.mark.parametrize("streaming", [True, False])
async def test_slow_server_times_out_as_llm_error(
    llm_server: FakeLLMServer, make_provider: MakeProvider, streaming: bool
) -> None:
    llm_server.reply(llm_server.stall(5.0))
    provider = make_provider(timeout_secs=0.2)

    started = time.monotonic()
    with pytest.raises(LLMError, match=r"timed out after 0\.2s") as info:
        if streaming:
            await events_of(provider, HELLO)
        else:
            await provider.complete(HELLO)
    assert time.monotonic() - started < 2.0
    assert not isinstance(info.value, aiohttp.ClientError)
    # A timeout already cost the user the whole wait, so it is not repeated.
    assert len(llm_server.requests) == 1


async def test_401_is_not_retried_and_never_shows_the_key(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    # A careless server echoes the key it was given; the message must not repeat it.
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}}
    llm_server.reply(llm_server.json_reply(echo, status=401))

    with pytest.raises(LLMError) as info:
        await events_of(make_provider(), HELLO)

    message = str(info.value)
    assert "HTTP 401" in message
    assert "Incorrect API key provided: ***" in message
    assert KEY not in message
    assert "Bearer" not in message
    assert len(llm_server.requests) == 1


async def test_stream_cut_before_any_text_is_retried(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(
        llm_server.sse([chunk({"role": "assistant", "content": ""})]),  # no finish, no [DONE]
        llm_server.sse(text_stream("second try")),
    )
    events = await events_of(make_provider(), HELLO)
    assert text_of(events) == "second try"
    assert len(llm_server.requests) == 2


async def test_stream_cut_after_text_is_not_retried(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(
        llm_server.sse([chunk({"content": "Half an ans"})]),
        llm_server.sse(text_stream("never sent")),
    )
    seen: list[StreamEvent] = []
    with pytest.raises(LLMError, match="ended before the reply was finished"):
        async for event in make_provider().stream(HELLO):
            seen.append(event)
    assert seen == [TextDelta("Half an ans")]
    assert len(llm_server.requests) == 1


async def test_connection_refused_is_retried_then_an_llm_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = LLMSettings(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1)
    provider = OpenAIProvider(settings, backoff_base=0.001)
    try:
        with pytest.raises(LLMError, match=r"connection failed.*2 attempts"):
            await provider.complete(HELLO)
    finally:
        await provider.aclose()


# Configuration and protocol ---------------------------------------------------------


async def test_no_key_means_no_authorization_header(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(llm_server.sse(text_stream("hi")))
    await events_of(make_provider(api_key=None), HELLO)
    assert "Authorization" not in llm_server.requests[0].headers


async def test_empty_model_is_discovered_from_the_server(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    models = {"object": "list", "data": [{"id": "qwen2.5:7b", "object": "model"}]}
    llm_server.reply(llm_server.json_reply(models), llm_server.sse(text_stream("hi")))
    provider = make_provider(model="")

    await events_of(provider, HELLO)
    await events_of(provider, HELLO)

    paths = [r.path for r in llm_server.requests]
    assert paths == ["/v1/models", "/v1/chat/completions", "/v1/chat/completions"]
    assert llm_server.requests[1].body["model"] == "qwen2.5:7b"
    assert provider.model_name == "qwen2.5:7b"


async def test_empty_model_falls_back_to_default_when_server_cannot_list(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(llm_server.json_reply({}, status=404), llm_server.sse(text_stream("hi")))
    provider = make_provider(model="")
    await events_of(provider, HELLO)
    assert llm_server.requests[1].body["model"] == "default"


def test_from_settings_requires_a_key_for_api_openai_com(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MY_OPENAI_KEY", raising=False)
    with pytest.raises(ConfigError, match="MY_OPENAI_KEY"):
        OpenAIProvider.from_settings(LLMSettings(provider="openai", api_key_env="MY_OPENAI_KEY"))


async def test_from_settings_reads_the_key_and_allows_keyless_local_servers(
    llm_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    local = OpenAIProvider.from_settings(LLMSettings(base_url=llm_server.base_url, model="m"))
    await local.aclose()

    monkeypatch.setenv("MY_OPENAI_KEY", KEY)
    settings = LLMSettings(base_url=llm_server.base_url, model="m", api_key_env="MY_OPENAI_KEY")
    llm_server.reply(llm_server.sse(text_stream("hi")))
    provider = OpenAIProvider.from_settings(settings)
    try:
        await events_of(provider, HELLO)
    finally:
        await provider.aclose()
    assert llm_server.requests[0].headers["Authorization"] == f"Bearer {KEY}"


async def test_from_settings_reads_the_key_from_the_secrets_directory(
    llm_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # As Docker mounts it: /run/secrets/OPENAI_API_KEY, with a trailing newline.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "OPENAI_API_KEY").write_text(KEY + "\n")
    monkeypatch.setenv("PICOBOT_SECRETS_DIR", str(tmp_path / "secrets"))
    llm_server.reply(llm_server.sse(text_stream("hi")))
    provider = OpenAIProvider.from_settings(LLMSettings(base_url=llm_server.base_url, model="m"))
    try:
        await events_of(provider, HELLO)
    finally:
        await provider.aclose()
    assert llm_server.requests[0].headers["Authorization"] == f"Bearer {KEY}"


async def test_default_model_and_protocol() -> None:
    provider = OpenAIProvider(LLMSettings(provider="openai"), api_key=KEY)
    try:
        assert isinstance(provider, LLMProvider)
        assert provider.model_name == DEFAULT_OPENAI_MODEL
        assert provider.endpoint == "https://api.openai.com/v1/chat/completions"
        assert provider.count_tokens("hello") is None
    finally:
        await provider.aclose()


async def test_a_borrowed_session_stays_open(
    llm_server: FakeLLMServer,
) -> None:
    llm_server.reply(llm_server.sse(text_stream("hi")))
    async with aiohttp.ClientSession() as session:
        settings = LLMSettings(base_url=llm_server.base_url, model="m")
        provider = OpenAIProvider(settings, session=session)
        assert (await collect(provider.stream(HELLO))).text == "hi"
        await provider.aclose()
        assert not session.closed


# Helpers ---------------------------------------------------------------------------


def test_sse_parser_handles_comments_names_multiline_data_and_cr() -> None:
    parser = SSEParser()
    events = parser.feed(b': keep-alive\r\nevent: ping\rdata: a\ndata: b\n\ndata: {"x":')
    events += parser.feed(b" 1}\r")
    events += parser.feed(b"\n\r\ndata: tail")
    events += parser.close()
    assert events == [SSEEvent("ping", "a\nb"), SSEEvent("message", '{"x": 1}')]


def test_retry_after_parsing_and_backoff_bounds() -> None:
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert parse_retry_after({"Retry-After": "soon"}) is None
    policy = RetryPolicy(max_retries=5, backoff_base=1.0, max_backoff=5.0)
    assert 1.0 <= policy.delay(0) <= 1.1
    assert 4.0 <= policy.delay(2) <= 4.4
    assert policy.delay(9) == 5.0
    assert policy.delay(0, retry_after=60) == 5.0


async def test_cache_usage_is_counted(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    before = metric_value("picobot_llm_cached_prompt_tokens_total", provider="openai")
    usage = {
        "choices": [],
        "usage": {"prompt_tokens": 2048, "prompt_tokens_details": {"cached_tokens": 1920}},
    }
    llm_server.reply(llm_server.sse([*text_stream("ok")[:-1], usage, "[DONE]"]))
    await events_of(make_provider(), HELLO)
    assert metric_value("picobot_llm_cached_prompt_tokens_total", provider="openai") == (
        before + 1920
    )
