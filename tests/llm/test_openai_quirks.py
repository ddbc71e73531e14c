"""OpenAIProvider against what real OpenAI-compatible servers send besides the happy path:
llama-server's error lines, Ollama's reused tool-call index, replies that are not a stream."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest
from aiohttp import web

from picobot.errors import LLMError
from picobot.llm.base import Finish, TextDelta, ToolCall, ToolCalls
from picobot.llm.sse import SSEEvent, SSEParser

from .conftest import HELLO, WEATHER, FakeLLMServer, Responder
from .test_openai import (
    KEY,
    MakeProvider,
    chunk,
    completion,
    events_of,
    make_provider,
    text_stream,
)

__all__ = ["make_provider"]  # the fixture, shared with test_openai


STREAM = text_stream("ok")


def sse_bytes(*lines: str) -> bytes:
    return "".join(f"{line}\n" for line in lines).encode()


LLAMA_ERROR = {"code": 500, "message": "the request exceeds the context size", "type": "server"}


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        # llama-server reports a failure after the 200 as an "error:" line, then [DONE].
        (sse_bytes(f"error: {json.dumps(LLAMA_ERROR)}", "", "data: [DONE]", ""), "context size"),
        (sse_bytes("event: error", 'data: {"error": {"message": "backend died"}}', ""), "died"),
    ],
)
async def test_error_reported_in_the_stream_is_an_llm_error_not_an_empty_answer(
    llm_server: FakeLLMServer, make_provider: MakeProvider, body: bytes, shown: str
) -> None:
    llm_server.reply(llm_server.raw(body))

    with pytest.raises(LLMError, match=f"error in stream: .*{shown}"):
        await events_of(make_provider(), HELLO)
    # A failure the server explained is not retried.
    assert [r.path for r in llm_server.requests] == ["/v1/chat/completions"]


async def test_ollama_tool_calls_all_at_index_0_stay_separate(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    # Ollama streams each call of a reply whole, every one with index 0.
    def whole(call_id: str, city: str) -> dict[str, Any]:
        arguments = json.dumps({"city": city})
        function = {"name": "get_weather", "arguments": arguments}
        return chunk({"tool_calls": [{"id": call_id, "index": 0, "function": function}]})

    llm_server.reply(
        llm_server.sse([whole("call_1", "Paris"), whole("call_2", "Oslo"), chunk({}, "tool_calls")])
    )

    events = await events_of(make_provider(), HELLO, [WEATHER])

    paris = ToolCall("call_1", "get_weather", '{"city": "Paris"}')
    oslo = ToolCall("call_2", "get_weather", '{"city": "Oslo"}')
    assert events == [ToolCalls((paris, oslo)), Finish("tool_calls")]


@pytest.mark.parametrize(
    ("body", "content_type", "shown"),
    [
        (b'{"error": {"message": "model llama9 not found"}}', "application/json", "not found"),
        (b"<html><body>Sign in to the proxy</body></html>", "text/html", "Sign in"),
    ],
)
async def test_a_200_that_is_not_an_event_stream_says_so_and_is_not_retried(
    llm_server: FakeLLMServer,
    make_provider: MakeProvider,
    body: bytes,
    content_type: str,
    shown: str,
) -> None:
    llm_server.reply(llm_server.raw(body, content_type=content_type))

    with pytest.raises(LLMError) as info:
        await events_of(make_provider(), HELLO)

    message = str(info.value)
    assert f"expected an event stream, the server sent {content_type}" in message
    assert shown in message
    assert len(llm_server.requests) == 1


async def test_an_event_stream_labelled_json_is_still_read(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    # Some servers send their SSE as application/json; only the body tells.
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in STREAM[:-1])
    llm_server.reply(llm_server.raw(body + b"data: [DONE]\n\n", content_type="application/json"))

    assert await events_of(make_provider(), HELLO) == [TextDelta("ok"), Finish("stop")]


async def test_error_inside_the_stream_never_shows_the_key(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(llm_server.sse([{"error": {"message": f"key {KEY} is revoked"}}]))

    with pytest.raises(LLMError) as info:
        await events_of(make_provider(), HELLO)

    assert str(info.value) == "openai: error in stream: key *** is revoked"


async def test_a_leading_byte_order_mark_is_skipped(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    first = json.dumps(chunk({"content": "hi"}, "stop")).encode()
    llm_server.reply(llm_server.raw(b"\xef\xbb\xbfdata: " + first + b"\n\ndata: [DONE]\n\n"))

    assert await events_of(make_provider(), HELLO) == [TextDelta("hi"), Finish("stop")]


def test_sse_parser_reads_an_error_field_as_an_error_event() -> None:
    parser = SSEParser()
    events = parser.feed(b'error: {"message": "x"}\n\ndata: [DONE]\n\n')
    assert events == [SSEEvent("error", '{"message": "x"}'), SSEEvent("message", "[DONE]")]


@pytest.mark.parametrize(
    "bad_chunk",
    [
        {"choices": {"0": {"delta": {"content": "x"}}}},  # choices an object
        {"choices": [{"delta": "x"}]},  # a delta that is a string
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": "f"}]}}]},
    ],
)
async def test_a_stream_chunk_of_the_wrong_shape_is_an_llm_error(
    llm_server: FakeLLMServer, make_provider: MakeProvider, bad_chunk: dict[str, Any]
) -> None:
    # An LLMError tells the user the model failed; anything else read as PicoBot's own bug.
    llm_server.reply(llm_server.sse([bad_chunk, "[DONE]"]))
    with pytest.raises(LLMError, match="openai: the server's reply does not have the expected"):
        await events_of(make_provider(), HELLO)


@pytest.mark.parametrize(
    "bad_reply",
    [
        {"choices": {"0": {}}},
        {"choices": [{"message": "x"}]},
        {"choices": [{"message": {"tool_calls": [{"function": "f"}]}}]},
    ],
)
async def test_a_whole_reply_of_the_wrong_shape_is_an_llm_error(
    llm_server: FakeLLMServer, make_provider: MakeProvider, bad_reply: dict[str, Any]
) -> None:
    llm_server.reply(llm_server.json_reply(bad_reply))
    with pytest.raises(LLMError, match="does not have the expected shape"):
        await make_provider().complete(HELLO)


@pytest.mark.parametrize("status", [408, 409])
@pytest.mark.parametrize("streaming", [True, False])
async def test_408_and_409_are_retried_as_the_sdks_do(
    llm_server: FakeLLMServer, make_provider: MakeProvider, status: int, streaming: bool
) -> None:
    llm_server.reply(
        llm_server.json_reply({"error": {"message": "try again"}}, status=status),
        llm_server.sse(STREAM)
        if streaming
        else llm_server.json_reply(completion({"role": "assistant", "content": "ok"})),
    )
    provider = make_provider(backoff_base=0.001)
    if streaming:
        events = await events_of(provider, HELLO)
        assert [e.text for e in events if isinstance(e, TextDelta)] == ["ok"]
    else:
        assert (await provider.complete(HELLO)).text == "ok"
    assert len(llm_server.requests) == 2


DEEP = b"[" * 100_000 + b"]" * 100_000  # valid JSON nested past the parser's recursion limit


@pytest.mark.parametrize("streaming", [True, False])
async def test_json_nested_too_deep_for_the_parser_is_an_llm_error(
    llm_server: FakeLLMServer, make_provider: MakeProvider, streaming: bool
) -> None:
    # json.loads raises RecursionError, not ValueError, for such input; it once escaped
    # as PicoBot's own internal error instead of "the model failed".
    if streaming:
        llm_server.reply(llm_server.raw(b"data: " + DEEP + b"\n\n"))
        with pytest.raises(LLMError, match="not JSON"):
            await events_of(make_provider(), HELLO)
    else:
        llm_server.reply(llm_server.raw(DEEP, content_type="application/json"))
        with pytest.raises(LLMError, match="not JSON"):
            await make_provider().complete(HELLO)


async def test_an_error_body_nested_too_deep_is_shown_as_text(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.reply(llm_server.raw(DEEP, content_type="application/json", status=400))
    with pytest.raises(LLMError, match=r"400.*\[\[\["):
        await make_provider().complete(HELLO)


def drip(
    llm_server: FakeLLMServer, lines: list[bytes], every: float, *, forever: bool = False
) -> Responder:
    """Stream ``lines`` one every ``every`` seconds (repeating them until teardown if
    ``forever``)."""

    async def respond(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        while True:
            for line in lines:
                await resp.write(line)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(llm_server.release.wait(), every)
                if llm_server.release.is_set():
                    return resp
            if not forever:
                return resp

    return respond


async def test_keep_alives_without_content_still_time_out(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    # A proxy that sends ": keep-alive" comments for ever and never an answer once held
    # the turn for ever: the timeout only saw silence on the socket.
    llm_server.reply(drip(llm_server, [b": keep-alive\n\n"], 0.05, forever=True))
    with pytest.raises(LLMError, match=r"no reply for 0\.3s"):
        await events_of(make_provider(timeout_secs=0.3), HELLO)
    assert len(llm_server.requests) == 1


async def test_a_slow_steady_answer_outlasts_the_timeout(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    # The timeout bounds each wait for the next piece, not the whole answer.
    pieces = [f"data: {json.dumps(chunk({'content': w}))}\n\n".encode() for w in "abcdef"]
    llm_server.reply(drip(llm_server, [*pieces, b"data: [DONE]\n\n"], 0.1))
    events = await events_of(make_provider(timeout_secs=0.3), HELLO)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "abcdef"
