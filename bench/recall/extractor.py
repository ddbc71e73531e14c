"""The model that answers ``picobot facts extract`` during ``--learn``, and its counts.

PicoBot's extraction calls reach the stand-in under ``/learn/{tag}/v1`` (the
conversation's tag), so each call and its answer are counted per conversation:
calls, answers holding a JSON array, failed calls. What answers them:

- ``remote`` (``--learn-model URL``): the request is forwarded, unchanged but for
  ``stream: false`` and the model name, to the OpenAI-compatible server at ``URL``
  (``/chat/completions``; ``/models`` too), with the API key from the variable
  ``--learn-model-key-env`` names if any; its answer goes back to PicoBot as is.
- ``scripted``, ``empty``, ``junk``: **test fixtures, never figures**. ``scripted``
  answers with one fact per quoted user turn (the first :data:`SCRIPTED_FACTS`),
  subject the speaker, text the turn as quoted; ``empty`` answers ``[]``; ``junk``
  answers prose.

The bundled local model (``--learn-local``) runs inside the ``picobot`` process and
never comes here (see :mod:`bench.recall.learn`).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp

REMOTE = "remote"
LOCAL = "local"
FIXTURES = ("scripted", "empty", "junk")
"""Extractors for tests: they make figures move, they measure nothing."""
KINDS = (REMOTE, LOCAL, *FIXTURES)
SCRIPTED_FACTS = 10
UPSTREAM_TIMEOUT = 900.0
"""Seconds one forwarded extraction call may take (a small server on a busy CPU is slow)."""

_QUOTED = re.compile(r"^\[#\d+ user\] ([^:\n]{1,64}): (.+)$", re.MULTILINE)
_DATA = re.compile(r"<data[^>]*>\n?(.*?)\n?</data>", re.DOTALL)


@dataclass(frozen=True, slots=True)
class LearnModel:
    """What extracts the facts: ``kind`` in :data:`KINDS`."""

    kind: str
    base_url: str = ""
    """``remote``: the OpenAI-compatible base URL (``http://host:port/v1``)."""
    name: str = ""
    """``remote``: the model to ask for ("" = the first that ``/models`` lists)."""
    key_env: str = ""
    """``remote``: the environment variable holding its API key ("" = none)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown extraction model kind {self.kind!r}")
        if self.kind == REMOTE and not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"--learn-model: expected an http(s) base URL, got {self.base_url!r}")

    @property
    def fixture(self) -> bool:
        """A scripted stand-in (tests), not a model: its figures mean nothing."""
        return self.kind in FIXTURES

    def describe(self) -> str:
        """One line for the results."""
        if self.kind == REMOTE:
            return f"{self.name or '(first listed)'} at {self.base_url}"
        if self.kind == LOCAL:
            return "the bundled local model (provider local)"
        return f"{self.kind} extractor (a test fixture, not a model)"


def holds_json_array(answer: str) -> bool:
    """Whether an answer is a JSON array, alone or inside a code fence or prose.

    The outermost ``[`` ... ``]`` must parse as JSON and be a list; its items are not
    checked (PicoBot drops invalid ones itself).
    """
    start, end = answer.find("["), answer.rfind("]")
    if start < 0 or end < start:
        return False
    try:
        return isinstance(json.loads(answer[start : end + 1]), list)
    except (ValueError, RecursionError):
        return False


def scripted_answer(prompt: str) -> str:
    """The ``scripted`` fixture's answer: one fact per quoted user turn."""
    block = _DATA.search(prompt)
    quoted = block.group(1).replace("&lt;", "<") if block else ""
    facts = [
        {"subject": speaker.strip().casefold(), "category": "personal", "text": text.strip()}
        for speaker, text in _QUOTED.findall(quoted)[:SCRIPTED_FACTS]
    ]
    return json.dumps(facts)


def _text(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


class Extractor:
    """Answers and counts the extraction calls of each conversation (tag)."""

    def __init__(self, model: LearnModel) -> None:
        self.model = model
        self.counts: dict[str, Counter[str]] = {}
        """tag -> ``calls``, ``json`` (answers holding a JSON array), ``failed``."""
        self._session: aiohttp.ClientSession | None = None

    async def aclose(self) -> None:
        """Close the connection to the forwarded-to server."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=UPSTREAM_TIMEOUT)
            key = os.environ.get(self.model.key_env, "") if self.model.key_env else ""
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            self._session = aiohttp.ClientSession(timeout=timeout, headers=headers)
        return self._session

    def _url(self, path: str) -> str:
        return self.model.base_url.rstrip("/") + path

    async def models(self) -> dict[str, Any]:
        """The ``/models`` answer PicoBot sees."""
        if self.model.kind == REMOTE and not self.model.name:
            async with self._http().get(self._url("/models")) as response:
                response.raise_for_status()
                listed: dict[str, Any] = await response.json()
                return listed
        name = self.model.name or "extraction-fixture"
        return {"object": "list", "data": [{"id": name, "object": "model"}]}

    async def answer(self, tag: str, body: dict[str, Any]) -> str:
        """The answer to one extraction request of conversation ``tag``; counted.

        Raises when the forwarded-to server fails (counted as ``failed``).
        """
        counts = self.counts.setdefault(tag, Counter())
        counts["calls"] += 1
        messages = body.get("messages") or []
        if self.model.kind == "scripted":
            text = scripted_answer(_text(messages[-1]) if messages else "")
        elif self.model.kind == "empty":
            text = "[]"
        elif self.model.kind == "junk":
            text = "Here are some facts I noticed about the user."
        else:
            try:
                text = await self._forward(body)
            except Exception:
                counts["failed"] += 1
                raise
        counts["json"] += holds_json_array(text)
        return text

    async def _forward(self, body: dict[str, Any]) -> str:
        request = {**body, "stream": False}
        request.pop("stream_options", None)
        if self.model.name:
            request["model"] = self.model.name
        async with self._http().post(self._url("/chat/completions"), json=request) as response:
            response.raise_for_status()
            data = await response.json()
        content = data["choices"][0]["message"].get("content")
        return content if isinstance(content, str) else ""
