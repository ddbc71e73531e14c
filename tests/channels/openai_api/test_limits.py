"""The chat endpoint's limits and life cycle: body size, unknown routes, a client that
leaves mid-answer, and shutdown (new requests 503, a cut-off stream ends with an error)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import openai
import pytest

from picobot.channels.gate import ConnectionLimits
from picobot.channels.http_guard import HttpLimits
from picobot.channels.openai_api.server import OpenAIChannel
from picobot.config.settings import DataSettings, Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Inbound, Outbound, OutboundKind
from picobot.runtime import open_runtime

KEY = "alice-key-0123456789"
OTHER_KEY = "bobby-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
LIMITS = HttpLimits(ConnectionLimits(64, 0), 10.0, 30.0, 15.0)


@dataclass
class Endpoint:
    channel: OpenAIChannel
    model: ScriptedProvider
    http: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return f"{self.channel.url}/chat/completions"


@pytest.fixture
async def endpoint(tmp_path: Path) -> AsyncIterator[Endpoint]:
    settings = Settings(data=DataSettings(dir=str(tmp_path / "data")))
    settings.channels.openai.port = 0
    settings.channels.openai.max_body_bytes = 4096
    # Slow enough that a turn is still running when the test acts on it.
    model = ScriptedProvider(chunk_size=1, delay_secs=0.02)
    async with AsyncExitStack() as stack:
        rt = await stack.enter_async_context(open_runtime(settings, provider=model))
        channel = OpenAIChannel(
            rt.kernel,
            settings.channels.openai,
            LIMITS,
            keys_env="X",
            keys={KEY: "ws:alice", OTHER_KEY: "ws:bobby"},
            clock=lambda: 0.0,  # time stands still: the rate limit's buckets never refill
        )
        await channel.start()
        stack.push_async_callback(channel.stop, 0)
        http = await stack.enter_async_context(aiohttp.ClientSession())
        yield Endpoint(channel, model, http)


def body(text: str, *, stream: bool = False) -> dict[str, object]:
    return {"model": "picobot", "messages": [{"role": "user", "content": text}], "stream": stream}


async def test_a_body_over_the_limit_is_413(endpoint: Endpoint) -> None:
    big = body("x" * 5000)
    async with endpoint.http.post(endpoint.url, json=big, headers=AUTH) as r:
        assert r.status == 413
        assert (await r.json())["error"]["code"] == "request_too_large"
    assert endpoint.model.prompts == []


async def test_unknown_routes_answer_in_openai_shape(endpoint: Endpoint) -> None:
    async with endpoint.http.get(f"{endpoint.channel.url}/embeddings", headers=AUTH) as r:
        assert r.status == 404
        assert (await r.json())["error"]["type"] == "not_found_error"
    async with endpoint.http.get(endpoint.url, headers=AUTH) as r:
        assert r.status == 405
        assert "error" in await r.json()


async def test_a_client_that_leaves_mid_stream_still_gets_its_reply_stored(
    endpoint: Endpoint,
) -> None:
    async with endpoint.http.post(
        endpoint.url, json=body("a long question", stream=True), headers=AUTH
    ) as r:
        await r.content.readline()  # the answer has begun
        r.close()  # and the client is gone
    # Turns of a session run in order: this one's prompt holds the whole earlier reply.
    async with endpoint.http.post(endpoint.url, json=body("next"), headers=AUTH) as r:
        assert r.status == 200
    assert "You said: a long question" in json.dumps(
        [m.content for m in endpoint.model.prompts[-1]]
    )


async def test_shutdown_refuses_new_requests_and_lets_a_turn_finish(endpoint: Endpoint) -> None:
    async with aiohttp.ClientSession() as other:
        # A kept-alive connection, opened before the shutdown began.
        async with other.get(f"{endpoint.channel.url}/models", headers=AUTH) as r:
            assert r.status == 200
        async with endpoint.http.post(
            endpoint.url, json=body("y" * 60, stream=True), headers=AUTH
        ) as r:
            await r.content.readline()  # the stream has begun
            stopper = asyncio.ensure_future(endpoint.channel.stop(60))
            await asyncio.sleep(0)
            async with other.get(f"{endpoint.channel.url}/models", headers=AUTH) as refused:
                assert refused.status == 503
                assert (await refused.json())["error"]["code"] == "shutting_down"
            text = await r.text()
            await stopper
    assert "data: [DONE]" in text and "shutting_down" not in text


async def test_a_stream_cut_off_by_shutdown_ends_with_an_error(endpoint: Endpoint) -> None:
    async with endpoint.http.post(
        endpoint.url, json=body("x" * 400, stream=True), headers=AUTH
    ) as r:
        await r.content.readline()  # the stream has begun
        stopper = asyncio.ensure_future(endpoint.channel.stop(0))  # no grace
        text = await r.text()
        await stopper
    lines = [line for line in text.split("\n") if line]
    assert lines[-1] == "data: [DONE]"
    errors = [json.loads(line[6:]) for line in lines[:-1] if '"error"' in line]
    assert errors and errors[-1]["error"]["code"] == "shutting_down"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_failing_turn_is_a_generic_error(
    endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    """A bug below the channel: logged, the client gets a generic line, never the text."""

    async def broken(inbound: Inbound) -> AsyncIterator[Outbound]:
        yield Outbound(OutboundKind.TOKEN, "partial ")
        raise RuntimeError("secret internals")

    monkeypatch.setattr(endpoint.channel.kernel, "handle", broken)
    async with endpoint.http.post(endpoint.url, json=body("hi", stream=stream), headers=AUTH) as r:
        text = await r.text()
    assert "secret internals" not in text
    if stream:
        assert r.status == 200
        lines = [line for line in text.split("\n") if line]
        assert lines[-1] == "data: [DONE]"
        assert json.loads(lines[-2][6:])["error"]["code"] == "internal"
    else:
        assert r.status == 500
        assert json.loads(text)["error"]["type"] == "server_error"


async def test_the_rate_limit_is_per_key(endpoint: Endpoint) -> None:
    base = endpoint.channel.url
    async with (
        openai.AsyncOpenAI(api_key=KEY, base_url=base, max_retries=0) as alice,
        openai.AsyncOpenAI(api_key=OTHER_KEY, base_url=base, max_retries=0) as bobby,
    ):
        for _ in range(10):  # the burst
            await alice.models.list()
        with pytest.raises(openai.RateLimitError) as caught:
            await alice.models.list()
        assert int(caught.value.response.headers["Retry-After"]) >= 1
        assert caught.value.response.json()["error"]["code"] == "rate_limit_exceeded"
        await bobby.models.list()  # another key has a budget of its own


async def test_a_request_head_that_never_ends_gets_408(tmp_path: Path) -> None:
    """The endpoint sits behind the same deadlines as serve's other HTTP server."""
    settings = Settings(data=DataSettings(dir=str(tmp_path / "data")))
    settings.channels.openai.port = 0
    quick = HttpLimits(ConnectionLimits(64, 0), 0.2, 30.0, 15.0)
    async with open_runtime(settings, provider=ScriptedProvider()) as rt:
        channel = OpenAIChannel(
            rt.kernel, settings.channels.openai, quick, keys_env="X", keys={KEY: "ws:alice"}
        )
        await channel.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", channel.port)
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # no end
            async with asyncio.timeout(30):  # a net against hangs, not what is measured
                answer = await reader.read()
            writer.close()
        finally:
            await channel.stop(0)
    assert answer.startswith(b"HTTP/1.1 408")
