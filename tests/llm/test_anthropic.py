"""AnthropicProvider against a real local server speaking the Messages API wire format."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from picobot.config.settings import LLMSettings
from picobot.errors import ConfigError, LLMError
from picobot.llm.anthropic import (
    ANTHROPIC_VERSION,
    DEFAULT_ANTHROPIC_MODEL,
    EARLIER_OMITTED,
    AnthropicProvider,
    to_wire_messages,
)
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
)
from tests.scrape import metric_value

from .conftest import HELLO, WEATHER, FakeLLMServer

KEY = "sk-ant-test-0123456789"

Event = tuple[str, dict[str, Any]]
MakeProvider = Callable[..., AnthropicProvider]


def ev(kind: str, **fields: Any) -> Event:
    """One named SSE event whose data repeats the type, as the API sends it."""
    return (kind, {"type": kind, **fields})


EPHEMERAL = {"type": "ephemeral"}
MESSAGE_START = ev(
    "message_start",
    message={
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-test",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 25, "output_tokens": 1},
    },
)


def text_block(index: int, *pieces: str) -> list[Event]:
    """A text content block streamed as text_delta pieces."""
    return [
        ev("content_block_start", index=index, content_block={"type": "text", "text": ""}),
        *[
            ev("content_block_delta", index=index, delta={"type": "text_delta", "text": p})
            for p in pieces
        ],
        ev("content_block_stop", index=index),
    ]


def tool_block(index: int, call_id: str, name: str, *json_pieces: str) -> list[Event]:
    """A tool_use content block whose input arrives as input_json_delta pieces."""
    start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return [
        ev("content_block_start", index=index, content_block=start),
        *[
            ev(
                "content_block_delta",
                index=index,
                delta={"type": "input_json_delta", "partial_json": p},
            )
            for p in json_pieces
        ],
        ev("content_block_stop", index=index),
    ]


def finish(reason: str = "end_turn") -> list[Event]:
    return [
        ev(
            "message_delta",
            delta={"stop_reason": reason, "stop_sequence": None},
            usage={"output_tokens": 15},
        ),
        ev("message_stop"),
    ]


def text_reply(*pieces: str) -> list[Event]:
    return [MESSAGE_START, *text_block(0, *pieces), ev("ping"), *finish()]


@pytest.fixture
async def make_provider(llm_server: FakeLLMServer) -> AsyncIterator[MakeProvider]:
    """Build providers aimed at the fake server with tiny timeouts and backoff."""
    made: list[AnthropicProvider] = []

    def make(api_key: str | None = KEY, **overrides: Any) -> AnthropicProvider:
        fields: dict[str, Any] = {
            "provider": "anthropic",
            "model": "claude-test",
            "base_url": llm_server.base_url,
            "timeout_secs": 2.0,
            "max_retries": 2,
            "temperature": 0.3,
            "max_tokens": 100,
        }
        provider = AnthropicProvider(
            LLMSettings(**(fields | overrides)),
            api_key=api_key,
            backoff_base=0.01,
            max_backoff=0.05,
        )
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


async def events_of(provider: AnthropicProvider, *args: Any) -> list[StreamEvent]:
    return [event async for event in provider.stream(*args)]


def text_of(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def test_streams_text_and_sends_the_right_request(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(llm_server.sse(text_reply("Hello", ", world")))

    events = await events_of(make_provider(), HELLO)

    assert events == [TextDelta("Hello"), TextDelta(", world"), Finish("stop")]
    [request] = llm_server.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == ANTHROPIC_VERSION
    assert "Authorization" not in request.headers
    assert request.body == {
        "model": "claude-test",
        "max_tokens": 100,
        # Cache breakpoints after the system prompt and after the last message.
        "system": [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Hi there", "cache_control": EPHEMERAL}],
            }
        ],
        "temperature": 0.3,
        "stream": True,
    }


async def test_stream_survives_chunk_boundaries_anywhere(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    pieces = ("Grüße ", "aus ", "東京 🗼")
    llm_server.reply(llm_server.sse(text_reply(*pieces), split=1, line_end="\r\n"))
    assert text_of(await events_of(make_provider(), HELLO)) == "".join(pieces)


async def test_streamed_tool_use_blocks_become_tool_calls(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(
        llm_server.sse(
            [
                MESSAGE_START,
                *text_block(0, "Let me check."),
                *tool_block(1, "toolu_a", "get_weather", '{"ci', 'ty": "Par', 'is"}'),
                *tool_block(2, "toolu_b", "get_weather", '{"city": "Oslo"}'),
                *finish("tool_use"),
            ]
        )
    )

    events = await events_of(make_provider(), HELLO, [WEATHER])

    assert events == [
        TextDelta("Let me check."),
        ToolCalls(
            (
                ToolCall("toolu_a", "get_weather", '{"city": "Paris"}'),
                ToolCall("toolu_b", "get_weather", '{"city": "Oslo"}'),
            )
        ),
        Finish("tool_calls"),
    ]
    assert llm_server.requests[0].body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": WEATHER.parameters,
        }
    ]


async def test_tool_without_arguments_gets_an_empty_object(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(
        llm_server.sse([MESSAGE_START, *tool_block(0, "toolu_n", "now"), *finish("tool_use")])
    )
    events = await events_of(make_provider(), HELLO, [ToolSpec("now", "The time.")])
    assert events[0] == ToolCalls((ToolCall("toolu_n", "now", "{}"),))
    tool = llm_server.requests[0].body["tools"][0]
    assert tool["input_schema"] == {"type": "object", "properties": {}}


async def test_tool_round_trip_is_translated_to_blocks(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(llm_server.sse(text_reply("Sunny in Paris, snow in Oslo.")))
    calls = (
        ToolCall("toolu_a", "get_weather", '{"city": "Paris"}'),
        ToolCall("toolu_b", "get_weather", '{"city": "Oslo"}'),
    )
    messages = [
        *HELLO,
        ChatMessage("assistant", "Let me check.", tool_calls=calls),
        ChatMessage("tool", "sunny", tool_call_id="toolu_a"),
        ChatMessage("tool", "snow", tool_call_id="toolu_b"),
        ChatMessage("system", "Answer in one line."),
    ]

    await events_of(make_provider(), messages, [WEATHER])

    body = llm_server.requests[0].body
    assert body["system"][0]["text"] == "Be brief.\n\nAnswer in one line."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Hi there"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "toolu_a",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_b",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "sunny"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": "snow",
                    "cache_control": EPHEMERAL,
                },
            ],
        },
    ]


async def test_complete_reads_text_and_tool_use(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    reply = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_z", "name": "get_weather", "input": {"city": "Rome"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    llm_server.reply(llm_server.json_reply(reply))

    result = await make_provider().complete(HELLO, [WEATHER])

    assert result == Completion(
        "Checking.", (ToolCall("toolu_z", "get_weather", '{"city": "Rome"}'),), "tool_calls"
    )
    assert llm_server.requests[0].body["stream"] is False


async def test_overloaded_529_is_retried(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    llm_server.reply(
        llm_server.json_reply(overloaded, status=529),
        llm_server.sse(text_reply("ok")),
    )
    assert text_of(await events_of(make_provider(), HELLO)) == "ok"
    assert len(llm_server.requests) == 2


async def test_overloaded_event_before_text_is_retried(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    error = ev("error", error={"type": "overloaded_error", "message": "Overloaded"})
    llm_server.reply(llm_server.sse([MESSAGE_START, error]), llm_server.sse(text_reply("ok")))
    assert text_of(await events_of(make_provider(), HELLO)) == "ok"
    assert len(llm_server.requests) == 2


async def test_error_event_after_text_is_not_retried(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    error = ev("error", error={"type": "overloaded_error", "message": "Overloaded"})
    llm_server.reply(
        llm_server.sse([MESSAGE_START, *text_block(0, "Half")[:2], error]),
        llm_server.sse(text_reply("never sent")),
    )
    seen: list[StreamEvent] = []
    with pytest.raises(LLMError, match="overloaded_error"):
        async for event in make_provider().stream(HELLO):
            seen.append(event)
    assert seen == [TextDelta("Half")]
    assert len(llm_server.requests) == 1


async def test_stream_cut_before_message_stop_is_an_error(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(llm_server.sse([MESSAGE_START, *text_block(0, "Half")]))
    with pytest.raises(LLMError, match="ended before the reply was finished"):
        await events_of(make_provider(), HELLO)
    assert len(llm_server.requests) == 1


async def test_400_is_not_retried_and_never_shows_the_key(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    bad = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": f"bad request for key {KEY}"},
    }
    llm_server.reply(llm_server.json_reply(bad, status=400))

    with pytest.raises(LLMError) as info:
        await make_provider().complete(HELLO)

    assert "HTTP 400: bad request for key ***" in str(info.value)
    assert KEY not in str(info.value)
    assert len(llm_server.requests) == 1


async def test_persistent_500_gives_up_after_max_retries(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(llm_server.json_reply({"type": "error", "error": {}}, status=500))
    with pytest.raises(LLMError, match=r"HTTP 500.*3 attempts"):
        await events_of(make_provider(), HELLO)
    assert len(llm_server.requests) == 3


async def test_slow_server_times_out_as_llm_error(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(llm_server.stall(5.0))
    with pytest.raises(LLMError, match="timed out"):
        await events_of(make_provider(timeout_secs=0.2), HELLO)
    assert len(llm_server.requests) == 1


async def test_defaults_point_at_anthropic() -> None:
    provider = AnthropicProvider(LLMSettings(provider="anthropic"), api_key=KEY)
    try:
        assert isinstance(provider, LLMProvider)
        assert provider.endpoint == "https://api.anthropic.com/v1/messages"
        assert provider.model_name == DEFAULT_ANTHROPIC_MODEL
        assert provider.count_tokens("x") is None
    finally:
        await provider.aclose()
    proxy = AnthropicProvider(LLMSettings(base_url="http://127.0.0.1:9/v1/"))
    assert proxy.endpoint == "http://127.0.0.1:9/v1/messages"
    await proxy.aclose()


@pytest.mark.parametrize(
    ("base_url", "endpoint"),
    [
        # As Anthropic's SDKs write it: without /v1, which used to end in a bare 404.
        ("https://api.anthropic.com", "https://api.anthropic.com/v1/messages"),
        ("https://api.anthropic.com/", "https://api.anthropic.com/v1/messages"),
        ("https://api.anthropic.com/v1", "https://api.anthropic.com/v1/messages"),
        # Another host keeps its path as given (a gateway may not use /v1).
        ("https://gateway.example/anthropic", "https://gateway.example/anthropic/messages"),
    ],
)
async def test_the_sdk_style_base_url_gets_its_v1(base_url: str, endpoint: str) -> None:
    provider = AnthropicProvider(LLMSettings(provider="anthropic", base_url=base_url), api_key=KEY)
    try:
        assert provider.endpoint == endpoint
    finally:
        await provider.aclose()


def test_from_settings_reads_anthropic_api_key_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-not-this-one")
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        AnthropicProvider.from_settings(LLMSettings(provider="anthropic"))
    with pytest.raises(ConfigError, match="MY_CLAUDE_KEY"):
        AnthropicProvider.from_settings(
            LLMSettings(provider="anthropic", api_key_env="MY_CLAUDE_KEY")
        )


async def test_from_settings_sends_the_key_from_the_environment(
    llm_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    llm_server.reply(llm_server.sse(text_reply("hi")))
    settings = LLMSettings(provider="anthropic", base_url=llm_server.base_url)
    provider = AnthropicProvider.from_settings(settings)
    try:
        await events_of(provider, HELLO)
    finally:
        await provider.aclose()
    assert llm_server.requests[0].headers["x-api-key"] == KEY

    monkeypatch.delenv("ANTHROPIC_API_KEY")
    keyless = AnthropicProvider.from_settings(settings)  # a local gateway may need none
    await keyless.aclose()


def test_whitespace_only_text_is_not_sent_as_a_block() -> None:
    # The API refuses text blocks without non-whitespace text; a model may stream a
    # bare "\n\n" before its tool_use, which comes back in the next round's prompt.
    call = ToolCall("toolu_a", "get_weather", '{"city": "Paris"}')
    prompt = [*HELLO, ChatMessage("assistant", "\n\n", tool_calls=(call,))]

    _, wire = to_wire_messages(prompt)

    assert wire[1]["content"] == [
        {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Paris"}}
    ]


def test_a_history_that_starts_with_the_assistant_gets_a_user_turn_first() -> None:
    # The window can drop the user message an old answer replied to; the Messages API
    # (and proxies in front of it) refuse a first message that is not the user's.
    prompt = [
        ChatMessage("system", "Be brief."),
        ChatMessage("assistant", "Paris is sunny."),
        ChatMessage("user", "And tomorrow?"),
    ]

    system, wire = to_wire_messages(prompt)

    assert system == "Be brief."
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert wire[0]["content"] == [{"type": "text", "text": EARLIER_OMITTED}]
    assert wire[1]["content"] == [{"type": "text", "text": "Paris is sunny."}]
    # A prompt that already starts with the user is sent as it is.
    assert to_wire_messages(HELLO)[1][0]["content"] == [{"type": "text", "text": "Hi there"}]


async def test_cache_usage_is_counted(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    before = metric_value("picobot_llm_cached_prompt_tokens_total", provider="anthropic")
    prompt_before = metric_value("picobot_llm_prompt_tokens_total", provider="anthropic")
    start = ev(
        "message_start",
        message={
            "id": "msg_9",
            "type": "message",
            "role": "assistant",
            "content": [],
            "usage": {
                "input_tokens": 20,
                "cache_read_input_tokens": 1800,
                "cache_creation_input_tokens": 100,
            },
        },
    )
    llm_server.reply(llm_server.sse([start, *text_reply("ok")[1:]]))
    await events_of(make_provider(), HELLO)
    assert metric_value("picobot_llm_cached_prompt_tokens_total", provider="anthropic") == (
        before + 1800
    )
    assert metric_value("picobot_llm_prompt_tokens_total", provider="anthropic") == (
        prompt_before + 1920
    )
