"""A provider for the Anthropic Messages API.

The neutral Chat Completions-shaped prompt is translated on the way out: system
messages become the top-level ``system`` field, tool calls become ``tool_use`` blocks
and tool results ``tool_result`` blocks inside user messages, consecutive messages of
one role are merged because the API wants user and assistant to alternate, and a
history that starts with the assistant gets a placeholder user turn before it.
Finish reasons are mapped to the OpenAI vocabulary (``stop``, ``length``,
``tool_calls``) so the kernel sees one set of words whatever the backend.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from picobot.config.settings import LLMSettings
from picobot.config.sources import read_secret
from picobot.errors import UNREADABLE_JSON, ConfigError, LLMError
from picobot.llm.base import (
    ChatMessage,
    Completion,
    Finish,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCalls,
    ToolSpec,
)
from picobot.llm.http import HTTPTransport, RetryableError, url_host
from picobot.llm.sse import SSEEvent
from picobot.metrics import observe_prompt_tokens

ANTHROPIC_BASE_URL = "https://api.anthropic.com/v1"
"""Used when ``[llm] base_url`` is left at the OpenAI default."""
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_ANTHROPIC_MODEL = "claude-haiku-4-5"
"""Model used when ``[llm] model`` is empty."""
DEFAULT_KEY_ENV = "ANTHROPIC_API_KEY"
"""Env var read when ``[llm] api_key_env`` is left at its OpenAI default."""

_OPENAI_HOST = "api.openai.com"
_ANTHROPIC_HOST = "api.anthropic.com"
_OPENAI_KEY_ENV = "OPENAI_API_KEY"
_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}
# Error events that mean "try again later" rather than "this request is wrong".
_RETRYABLE_STREAM_ERRORS = {"overloaded_error", "api_error", "rate_limit_error"}
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class AnthropicProvider:
    """Anthropic Messages over aiohttp, streaming, with retries and tool use.

    Same constructor shape as :class:`picobot.llm.openai.OpenAIProvider`; the key is
    sent as ``x-api-key`` only when set.
    """

    def __init__(
        self,
        settings: LLMSettings,
        *,
        api_key: str | None = None,
        session: aiohttp.ClientSession | None = None,
        backoff_base: float = 0.5,
        max_backoff: float = 20.0,
    ) -> None:
        self._settings = settings
        self._base_url = anthropic_base_url(settings.base_url)
        self._api_key = api_key or None
        self._model = settings.model or DEFAULT_ANTHROPIC_MODEL
        self._http = HTTPTransport.for_provider(
            "anthropic",
            settings,
            api_key=api_key,
            session=session,
            backoff_base=backoff_base,
            max_backoff=max_backoff,
        )

    @classmethod
    def from_settings(cls, settings: LLMSettings) -> AnthropicProvider:
        """Build from settings, reading the key from ``settings.api_key_env``.

        Left at its default (``OPENAI_API_KEY``), the variable read is
        ``ANTHROPIC_API_KEY``. api.anthropic.com needs a key (ConfigError naming the
        variable); a proxy or local gateway may do without.
        """
        env = settings.api_key_env
        env = DEFAULT_KEY_ENV if env in ("", _OPENAI_KEY_ENV) else env
        key = read_secret(env)
        base = anthropic_base_url(settings.base_url)
        if not key and url_host(base) == url_host(ANTHROPIC_BASE_URL):
            raise ConfigError(
                f"llm.api_key_env: the environment variable {env} is not set; "
                f"{base} needs an API key"
            )
        return cls(settings, api_key=key or None)

    @property
    def model_name(self) -> str:
        """The configured model, or :data:`DEFAULT_ANTHROPIC_MODEL`."""
        return self._model

    @property
    def endpoint(self) -> str:
        """The URL requests are POSTed to."""
        return f"{self._base_url}/messages"

    async def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncIterator[StreamEvent]:
        """Stream one reply: text deltas, then any tool calls, then a Finish."""
        body = self._body(messages, tools, stream=True)
        async for event in self._http.stream_sse(self.endpoint, self._headers(), body, _decode):
            yield event

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> Completion:
        """Ask for one whole reply (no streaming)."""
        body = self._body(messages, tools, stream=False)
        return await self._http.post_json(self.endpoint, self._headers(), body, parse_message)

    def count_tokens(self, text: str) -> int | None:
        """No local tokenizer: the kernel's estimate applies."""
        return None

    async def aclose(self) -> None:
        """Close the HTTP session if this provider created it."""
        await self._http.aclose()

    def _headers(self) -> dict[str, str]:
        headers = {
            "anthropic-version": ANTHROPIC_VERSION,
            "Accept": "text/event-stream, application/json",
        }
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def _body(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], *, stream: bool
    ) -> dict[str, Any]:
        system, wire = to_wire_messages(messages)
        body: dict[str, Any] = {
            "model": self._model,
            "max_tokens": self._settings.reply_tokens,
            "messages": wire,
            # Anthropic accepts 0..1; the shared setting allows up to 2 (OpenAI's range).
            "temperature": min(self._settings.sampling_temperature, 1.0),
            "stream": stream,
        }
        # Prompt caching: breakpoints after the system prompt and after the last message.
        # The next turn's prompt extends this one (see kernel/prompt/retriever.py), so it
        # reads everything up to here from Anthropic's cache.
        if system:
            body["system"] = [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]
        if wire:
            wire[-1]["content"][-1]["cache_control"] = _EPHEMERAL
        if tools:
            body["tools"] = [
                {
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.parameters or _EMPTY_SCHEMA,
                }
                for t in tools
            ]
        return body


def anthropic_base_url(base_url: str) -> str:
    """``base_url`` without a trailing slash; OpenAI's default URL becomes Anthropic's.

    The shared ``[llm]`` section defaults to api.openai.com, which is never right here;
    ``https://api.anthropic.com``, as Anthropic's SDKs write it, gets its ``/v1``.
    """
    base = base_url.rstrip("/")
    host = url_host(base)
    if host == _OPENAI_HOST:
        return ANTHROPIC_BASE_URL
    if host == _ANTHROPIC_HOST and not urlsplit(base).path:
        # The SDKs' base URL (no /v1) would otherwise end in a bare 404.
        return f"{base}/v1"
    return base


_EPHEMERAL = {"type": "ephemeral"}
_INPUT_KINDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
"""What Anthropic's usage splits the prompt into (uncached, read, written)."""

EARLIER_OMITTED = "(earlier messages of this conversation are not shown)"
"""The user turn put before a history that would otherwise start with the assistant."""


def to_wire_messages(messages: Sequence[ChatMessage]) -> tuple[str, list[dict[str, Any]]]:
    """Split out the system prompt and convert the rest to alternating Messages turns."""
    system: list[str] = []
    wire: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            if message.content:
                system.append(message.content)
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue  # the API rejects blank text blocks and empty messages
        if wire and wire[-1]["role"] == role:
            # Several tool results (or a result then a user line) share one user turn.
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})
    if wire and wire[0]["role"] == "assistant":
        # The window dropped the user message an old answer replied to; the API wants
        # the user first, so a placeholder says what is missing rather than dropping
        # the answer.
        wire.insert(0, {"role": "user", "content": [{"type": "text", "text": EARLIER_OMITTED}]})
    return "\n\n".join(system), wire


def _blocks(message: ChatMessage) -> list[dict[str, Any]]:
    if message.role == "tool":
        if not message.tool_call_id:
            raise LLMError("anthropic: a tool result message needs its tool_call_id")
        return [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
        ]
    blocks: list[dict[str, Any]] = []
    # The API refuses a text block that is empty or only whitespace (a model may stream
    # a bare "\n\n" before its tool_use); such text carries nothing anyway.
    if message.content.strip():
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call)})
    return blocks


def _input(call: ToolCall) -> dict[str, Any]:
    # tool_use.input must be an object; a model that produced broken JSON gets {} back
    # rather than a request the API refuses outright.
    try:
        value = json.loads(call.arguments or "{}")
    except UNREADABLE_JSON:
        return {}
    return value if isinstance(value, dict) else {}


def observe_usage(message: Any) -> None:
    """Record the prompt tokens a reply's ``usage`` reports, and how many came from the
    prompt cache (``cache_read_input_tokens``)."""
    usage = message.get("usage") if isinstance(message, dict) else None
    if not isinstance(usage, dict):
        return
    parts = [usage.get(k) for k in _INPUT_KINDS]
    counts = [n for n in parts if isinstance(n, int)]
    cached = usage.get("cache_read_input_tokens")
    if counts:
        observe_prompt_tokens("anthropic", sum(counts), cached if isinstance(cached, int) else 0)


def parse_message(data: Any) -> Completion:
    """Read a non-streamed Messages reply."""
    observe_usage(data)
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise LLMError("anthropic: the reply has no content")
    text: list[str] = []
    calls: list[ToolCall] = []
    for block in data["content"]:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            text.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            args = json.dumps(block.get("input") or {}, ensure_ascii=False)
            calls.append(ToolCall(str(block.get("id", "")), str(block.get("name", "")), args))
    return Completion("".join(text), tuple(calls), _reason(data.get("stop_reason"), calls))


def _reason(stop_reason: Any, calls: Sequence[ToolCall]) -> str:
    if not stop_reason:
        return "tool_calls" if calls else "stop"
    return _REASONS.get(str(stop_reason), str(stop_reason))


@dataclass(slots=True)
class _ToolUse:
    """A tool_use block being assembled from input_json_delta pieces."""

    id: str
    name: str
    initial: str
    json: str = ""


async def _decode(events: AsyncIterator[SSEEvent]) -> AsyncGenerator[StreamEvent, None]:
    """Turn Messages stream events into StreamEvents."""
    tools: dict[int, _ToolUse] = {}
    stop_reason: Any = None
    finished = False
    async for event in events:
        data = _parse_event(event.data)
        kind = data.get("type") or event.event
        index = data.get("index", 0)
        if kind == "content_block_start":
            block = data.get("content_block") or {}
            if block.get("type") == "tool_use":
                # input is usually {} here and arrives as JSON pieces in deltas.
                initial = json.dumps(block.get("input") or {}, ensure_ascii=False)
                tools[index] = _ToolUse(
                    str(block.get("id", "")), str(block.get("name", "")), initial
                )
            elif block.get("type") == "text" and block.get("text"):
                yield TextDelta(str(block["text"]))
        elif kind == "content_block_delta":
            delta = data.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                yield TextDelta(str(delta["text"]))
            elif delta.get("type") == "input_json_delta" and index in tools:
                tools[index].json += str(delta.get("partial_json", ""))
        elif kind == "message_delta":
            stop_reason = (data.get("delta") or {}).get("stop_reason") or stop_reason
        elif kind == "message_stop":
            finished = True
            break
        elif kind == "error":
            _raise_stream_error(data)
        elif kind == "message_start":
            observe_usage(data.get("message"))
        # ping, content_block_stop and future event types carry nothing the kernel needs.
    if not finished:
        raise RetryableError("anthropic: the stream ended before the reply was finished")
    calls = [ToolCall(t.id, t.name, t.json or t.initial) for _, t in sorted(tools.items())]
    if calls:
        yield ToolCalls(tuple(calls))
    yield Finish(_reason(stop_reason, calls))


def _parse_event(data: str) -> dict[str, Any]:
    try:
        parsed = json.loads(data)
    except UNREADABLE_JSON:
        raise LLMError("anthropic: the stream carried an event that is not JSON") from None
    if not isinstance(parsed, dict):
        raise LLMError("anthropic: the stream carried an event that is not an object")
    return parsed


def _raise_stream_error(data: dict[str, Any]) -> None:
    err = data.get("error") or {}
    kind = str(err.get("type", "error")) if isinstance(err, dict) else "error"
    detail = str(err.get("message", "")) if isinstance(err, dict) else str(err)
    message = f"anthropic: {kind} in stream: {detail[:200]}"
    # The API reports overload as an event after the 200; it is as transient as a 529.
    if kind in _RETRYABLE_STREAM_ERRORS:
        raise RetryableError(message)
    raise LLMError(message)
