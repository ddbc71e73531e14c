"""The recording stand-in model: an OpenAI-compatible server that answers "ok".

``POST /c/{tag}/v1/chat/completions`` speaks the Chat Completions wire format, with
SSE streaming (``"stream": true``, chunks then ``data: [DONE]``) or one JSON reply;
``GET /c/{tag}/v1/models`` lists the one model. Each replayed conversation has its
own ``tag`` (its PicoBot server's ``[llm] base_url`` ends in ``/c/{tag}/v1``), so
every request is attributed to its conversation without guessing.

Every request is recorded (its messages, whether it streamed, how many tools it
offered) under the label the replay set for that conversation before sending the
turn, and handed to the replay by :meth:`StandIn.take`.

Replies: a chat turn gets :data:`CHAT_REPLY`. A request whose system message asks
for a summary (PicoBot's background summarization) gets a short extractive digest
of the words it quotes most, so a summary exists and stays small, and it never
copies a turn verbatim (which would count as recalled evidence).

With an :class:`~bench.recall.extractor.Extractor`, ``/learn/{tag}/v1`` answers the
extraction calls of ``picobot facts extract`` (``--learn``); they are counted there,
not recorded here.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bench.recall.extractor import Extractor
from bench.recall.metric import content

CHAT_REPLY = "ok"
MODEL = "recall-standin"
DIGEST_WORDS = 12

_WORD = re.compile(r"[^\W\d_]{4,}")
_COMMON_TEXT = """
    that this with have what your from they were been about would there their will
    when just like really know think much more some time good great thanks sounds
    also into them then than very well yeah summary conversation messages previous
    none data user assistant write updated fold
"""
_COMMON = frozenset(_COMMON_TEXT.split())


@dataclass(slots=True)
class Call:
    """One recorded model request."""

    label: str | None
    messages: list[dict[str, Any]]
    stream: bool
    tools: int
    background: bool

    @property
    def last_user(self) -> str:
        """The text of the last message, when it is the user's ("" otherwise)."""
        if not self.messages or self.messages[-1].get("role") != "user":
            return ""
        return content(self.messages[-1])


@dataclass(slots=True)
class _Tag:
    label: str | None = None
    calls: list[Call] = field(default_factory=list)


def digest(text: str) -> str:
    """A summary-shaped answer: the words ``text`` uses most, in order of frequency."""
    counts = Counter(w.casefold() for w in _WORD.findall(text))
    top = [w for w, _ in counts.most_common() if w not in _COMMON][:DIGEST_WORDS]
    if not top:
        return "The conversation so far was small talk."
    return "The conversation so far touched on: " + ", ".join(top) + "."


def _is_background(messages: list[dict[str, Any]]) -> bool:
    system = content(messages[0]) if messages and messages[0].get("role") == "system" else ""
    return "summary" in system.casefold()


class StandIn:
    """The stand-in server; ``async with StandIn() as model: model.base_url(tag)``."""

    def __init__(self, extractor: Extractor | None = None) -> None:
        self.extractor = extractor
        """Answers ``/learn/{tag}/v1``: the extraction calls of ``--learn``."""
        self._tags: dict[str, _Tag] = {}
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.counts: Counter[str] = Counter()
        """Requests answered: ``chat``, ``background``, ``rejected``."""

    async def __aenter__(self) -> StandIn:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes(
            [
                web.post("/c/{tag}/v1/chat/completions", self._completions),
                web.get("/c/{tag}/v1/models", self._models),
                web.post("/learn/{tag}/v1/chat/completions", self._learn),
                web.get("/learn/{tag}/v1/models", self._learn_models),
            ]
        )
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.extractor is not None:
            await self.extractor.aclose()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def base_url(self, tag: str) -> str:
        """The ``[llm] base_url`` of the PicoBot server replaying conversation ``tag``."""
        self._tags.setdefault(tag, _Tag())
        return f"http://127.0.0.1:{self.port}/c/{tag}/v1"

    def learn_url(self, tag: str) -> str:
        """The ``[llm] base_url`` of ``picobot facts extract`` for conversation ``tag``."""
        return f"http://127.0.0.1:{self.port}/learn/{tag}/v1"

    def label(self, tag: str, label: str | None) -> None:
        """Record the requests of ``tag`` that arrive from now on under ``label``."""
        self._tags.setdefault(tag, _Tag()).label = label

    def take(self, tag: str) -> list[Call]:
        """The requests of ``tag`` recorded since the last call, oldest first."""
        entry = self._tags.setdefault(tag, _Tag())
        calls, entry.calls = entry.calls, []
        return calls

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def _learn_models(self, request: web.Request) -> web.Response:
        if self.extractor is None:
            raise web.HTTPNotFound()
        try:
            return web.json_response(await self.extractor.models())
        except Exception as exc:  # the forwarded-to server's failure, told to PicoBot
            return web.json_response({"error": {"message": str(exc)}}, status=502)

    async def _learn(self, request: web.Request) -> web.StreamResponse:
        if self.extractor is None:
            raise web.HTTPNotFound()
        try:
            body = await request.json()
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                raise TypeError("messages")
        except (ValueError, TypeError):
            return web.json_response({"error": {"message": "not a chat request"}}, status=400)
        try:
            text = await self.extractor.answer(request.match_info["tag"], body)
        except Exception as exc:
            return web.json_response({"error": {"message": str(exc)}}, status=502)
        if body.get("stream"):
            return await self._stream(request, text)
        return web.json_response(_completion(text))

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        tag = request.match_info["tag"]
        try:
            body = await request.json()
            messages = body["messages"]
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                raise TypeError("messages")
        except (ValueError, KeyError, TypeError):
            self.counts["rejected"] += 1
            error = {"error": {"message": "not a chat completions request", "type": "invalid"}}
            return web.json_response(error, status=400)
        entry = self._tags.setdefault(tag, _Tag())
        background = _is_background(messages)
        stream = bool(body.get("stream"))
        entry.calls.append(
            Call(entry.label, messages, stream, len(body.get("tools") or ()), background)
        )
        self.counts["background" if background else "chat"] += 1
        text = digest(content(messages[-1]) if messages else "") if background else CHAT_REPLY
        if stream:
            return await self._stream(request, text)
        return web.json_response(_completion(text))

    @staticmethod
    async def _stream(request: web.Request, text: str) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunks = [
            _chunk({"role": "assistant", "content": text}, None),
            _chunk({}, "stop"),
        ]
        for chunk in chunks:
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-standin",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-standin",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1},
    }
