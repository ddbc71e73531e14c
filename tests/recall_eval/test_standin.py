"""The stand-in model speaks the Chat Completions wire format and records every call."""

from __future__ import annotations

import json

import aiohttp

from bench.recall.standin import CHAT_REPLY, StandIn, digest


async def test_it_streams_like_the_real_api_and_records_the_messages() -> None:
    async with StandIn() as model, aiohttp.ClientSession() as http:
        base = model.base_url("c1")
        model.label("c1", "D1:1")
        body = {
            "model": "m",
            "stream": True,
            "messages": [
                {"role": "system", "content": "You are PicoBot."},
                {"role": "user", "content": "Ann: hello there"},
            ],
            "tools": [{"type": "function", "function": {"name": "memory"}}],
        }
        async with http.post(f"{base}/chat/completions", json=body) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            events = [
                line[len("data: ") :]
                for line in (await resp.text()).splitlines()
                if line.startswith("data: ")
            ]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        assert text == CHAT_REPLY
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"

        async with http.get(f"{base}/models") as resp:
            assert (await resp.json())["data"][0]["id"]
        calls = model.take("c1")
        assert len(calls) == 1
        assert calls[0].label == "D1:1" and calls[0].stream and calls[0].tools == 1
        assert calls[0].last_user == "Ann: hello there"
        assert not calls[0].background
        assert model.take("c1") == []


async def test_a_summary_request_gets_a_digest_and_a_bad_body_a_400() -> None:
    async with StandIn() as model, aiohttp.ClientSession() as http:
        url = f"{model.base_url('c2')}/chat/completions"
        body = {
            "stream": False,
            "messages": [
                {"role": "system", "content": "You maintain the running summary of a chat."},
                {"role": "user", "content": "Ann talked about kayaks, kayaks and rivers."},
            ],
        }
        async with http.post(url, json=body) as resp:
            reply = (await resp.json())["choices"][0]["message"]["content"]
        assert reply == digest(body["messages"][1]["content"])  # type: ignore[index]
        assert reply.startswith("The conversation so far touched on: kayaks")
        assert model.take("c2")[0].background
        async with http.post(url, data=b"{not json") as resp:
            assert resp.status == 400
        assert model.counts == {"background": 1, "rejected": 1}
