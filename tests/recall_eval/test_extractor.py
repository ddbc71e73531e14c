"""The extraction route of the stand-in: fixtures, forwarding to a real server, counts."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bench.recall.extractor import Extractor, LearnModel, holds_json_array, scripted_answer
from bench.recall.standin import CHAT_REPLY, StandIn

PROMPT = (
    '<data source="conversation" trust="untrusted">\n'
    "[#1 user] Ann: I adopted an axolotl named Quill &lt;3\n"
    "[#2 assistant] ok\n"
    "[#3 user] Ann: My sister lives in Lyon.\n"
    "</data>\n\nList the durable facts as a JSON array now."
)


def _request(stream: bool = False) -> dict[str, Any]:
    return {
        "model": "whatever",
        "stream": stream,
        "messages": [
            {"role": "system", "content": "You pick out durable facts."},
            {"role": "user", "content": PROMPT},
        ],
    }


def test_an_answer_counts_as_json_only_when_it_holds_a_json_array() -> None:
    assert holds_json_array('[{"subject": null, "category": "plan", "text": "x"}]')
    assert holds_json_array("```json\n[]\n```")
    assert holds_json_array('Sure! [{"text": "likes tea"}] Hope that helps.')
    assert not holds_json_array("The user likes tea.")
    assert not holds_json_array("[not json]")
    assert not holds_json_array('{"facts": "none"}')


def test_the_scripted_fixture_answers_one_fact_per_quoted_user_turn() -> None:
    facts = json.loads(scripted_answer(PROMPT))
    assert facts == [
        {"subject": "ann", "category": "personal", "text": "I adopted an axolotl named Quill <3"},
        {"subject": "ann", "category": "personal", "text": "My sister lives in Lyon."},
    ]
    assert json.loads(scripted_answer("no data block")) == []


@pytest.mark.parametrize("kind", ["remote", "local", "nonsense"])
def test_a_remote_model_needs_a_url_and_kinds_are_checked(kind: str) -> None:
    if kind == "local":
        assert not LearnModel(kind).fixture
        return
    with pytest.raises(ValueError, match=r"base URL|unknown"):
        LearnModel(kind, "localhost:8080")


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, str]:
    async with http.post(f"{url}/chat/completions", json=body) as resp:
        text = await resp.text()
        if resp.status != 200:
            return resp.status, text
        if body.get("stream"):
            chunks = [
                json.loads(line[len("data: ") :])
                for line in text.splitlines()
                if line.startswith("data: {")
            ]
            return 200, "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        return 200, json.loads(text)["choices"][0]["message"]["content"]


async def test_requests_are_forwarded_to_the_named_server_and_counted() -> None:
    # The "real" server here is another stand-in on loopback: it answers "ok".
    async with StandIn() as upstream:
        model = LearnModel("remote", upstream.base_url("up"), "served-model")
        async with StandIn(Extractor(model)) as standin, aiohttp.ClientSession() as http:
            url = standin.learn_url("c1")
            assert await _post(http, url, _request(stream=True)) == (200, CHAT_REPLY)
            assert await _post(http, url, _request()) == (200, CHAT_REPLY)
            async with http.get(f"{url}/models") as resp:
                assert (await resp.json())["data"][0]["id"] == "served-model"
            assert standin.extractor is not None
            counts = standin.extractor.counts["c1"]
            assert (counts["calls"], counts["json"], counts["failed"]) == (2, 0, 0)
        forwarded = upstream.take("up")
        assert len(forwarded) == 2
        assert all(not c.stream for c in forwarded)  # asked whole, streamed back by the proxy
        assert forwarded[0].last_user == PROMPT


async def test_the_api_key_comes_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    async def completions(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response({"choices": [{"message": {"content": "[]"}}]})

    app = web.Application()
    app.add_routes([web.post("/v1/chat/completions", completions)])
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    monkeypatch.setenv("EVAL_TEST_KEY", "sk-test-123")
    try:
        for key_env, header in (("EVAL_TEST_KEY", "Bearer sk-test-123"), ("", "")):
            model = LearnModel("remote", f"http://127.0.0.1:{port}/v1", "m", key_env)
            extractor = Extractor(model)
            try:
                assert await extractor.answer("c1", _request()) == "[]"
            finally:
                await extractor.aclose()
            assert seen[-1] == header
    finally:
        await runner.cleanup()


async def test_a_failing_server_is_a_counted_failure_not_an_answer() -> None:
    async with StandIn() as closed:
        dead = closed.base_url("x")
    model = LearnModel("remote", dead, "m")
    async with StandIn(Extractor(model)) as standin, aiohttp.ClientSession() as http:
        status, _ = await _post(http, standin.learn_url("c1"), _request())
        assert status == 502
        assert standin.extractor is not None
        assert standin.extractor.counts["c1"]["failed"] == 1
        assert standin.extractor.counts["c1"]["json"] == 0


async def test_fixtures_answer_without_a_server() -> None:
    for kind, json_answers in (("scripted", 1), ("empty", 1), ("junk", 0)):
        async with StandIn(Extractor(LearnModel(kind))) as standin, aiohttp.ClientSession() as http:
            status, text = await _post(http, standin.learn_url("c1"), _request())
            assert status == 200
            assert holds_json_array(text) == bool(json_answers)
            assert standin.extractor is not None
            assert standin.extractor.counts["c1"]["json"] == json_answers
    async with StandIn() as plain, aiohttp.ClientSession() as http:
        status, _ = await _post(http, plain.learn_url("c1"), _request())
        assert status == 404  # no extractor, no extraction route
