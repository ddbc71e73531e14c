"""A provider for any OpenAI-compatible Chat Completions server.

Works with OpenAI itself and with the servers that copy its wire format: Ollama,
vLLM, llama.cpp's ``llama-server``, LM Studio. Replies stream over SSE; tool calls
arrive in fragments keyed by index and are reassembled here.

When ``[llm] model`` is empty the provider sends :data:`DEFAULT_OPENAI_MODEL` to
api.openai.com; any other server is asked once for its ``/models`` list and the first
model it serves is used (``"default"`` if it cannot say), which is right for the
usual single-model local server.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

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
from picobot.llm.http import HTTPTransport, RetryableError, error_text, url_host
from picobot.llm.sse import SSEEvent
from picobot.metrics import observe_prompt_tokens

log = logging.getLogger(__name__)

OPENAI_HOST = "api.openai.com"
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
"""Model sent to api.openai.com when ``[llm] model`` is empty."""
FALLBACK_MODEL = "default"
"""Model sent to other servers when it is empty and ``/models`` cannot tell."""
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class OpenAIProvider:
    """Chat Completions over aiohttp, streaming, with retries and tool calls.

    ``api_key`` is sent as ``Authorization: Bearer`` only when set. A ``session``
    passed in is borrowed and left open by :meth:`aclose`. ``backoff_base`` and
    ``max_backoff`` (seconds) shape the retry delays; tests make them tiny.
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
        self._base_url = settings.base_url.rstrip("/")
        self._api_key = api_key or None
        self._model = settings.model or (
            DEFAULT_OPENAI_MODEL if url_host(self._base_url) == OPENAI_HOST else ""
        )
        self._http = HTTPTransport.for_provider(
            "openai",
            settings,
            api_key=api_key,
            session=session,
            backoff_base=backoff_base,
            max_backoff=max_backoff,
        )

    @classmethod
    def from_settings(cls, settings: LLMSettings) -> OpenAIProvider:
        """Build from settings, reading the key from the env var ``settings.api_key_env``.

        A missing key is fine for local and third-party servers (Ollama, vLLM, ...),
        but api.openai.com always needs one, so that is a ConfigError naming the var.
        """
        key = read_secret(settings.api_key_env) if settings.api_key_env else ""
        if not key and url_host(settings.base_url) == OPENAI_HOST:
            raise ConfigError(
                f"llm.api_key_env: the environment variable {settings.api_key_env or '(none)'} "
                f"is not set; {settings.base_url} needs an API key"
            )
        return cls(settings, api_key=key or None)

    @property
    def model_name(self) -> str:
        """The configured or discovered model name."""
        return self._model or FALLBACK_MODEL

    @property
    def endpoint(self) -> str:
        """The URL requests are POSTed to."""
        return f"{self._base_url}/chat/completions"

    async def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncIterator[StreamEvent]:
        """Stream one reply: text deltas, then any tool calls, then a Finish."""
        body = await self._body(messages, tools, stream=True)
        async for event in self._http.stream_sse(self.endpoint, self._headers(), body, _decode):
            yield event

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> Completion:
        """Ask for one whole reply (no streaming)."""
        body = await self._body(messages, tools, stream=False)
        return await self._http.post_json(self.endpoint, self._headers(), body, parse_completion)

    def count_tokens(self, text: str) -> int | None:
        """The tokenizer lives on the server: the kernel's estimate applies."""
        return None

    async def aclose(self) -> None:
        """Close the HTTP session if this provider created it."""
        await self._http.aclose()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream, application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    async def _body(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], *, stream: bool
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": await self._resolve_model(),
            "messages": [to_wire_message(m) for m in messages],
            "temperature": self._settings.sampling_temperature,
            "max_tokens": self._settings.reply_tokens,
            "stream": stream,
            # The last chunk then reports usage, cached prompt tokens included.
            **({"stream_options": {"include_usage": True}} if stream else {}),
        }
        if tools:
            body["tools"] = [to_wire_tool(t) for t in tools]
        return body

    async def _resolve_model(self) -> str:
        if self._model:
            return self._model
        try:
            data = await self._http.get_json(f"{self._base_url}/models", self._headers())
            self._model = str(data["data"][0]["id"])
        except RetryableError as exc:
            # Server unreachable for now: try again next turn rather than pin a guess.
            log.warning("openai: cannot list models (%s); sending %r", exc, FALLBACK_MODEL)
            return FALLBACK_MODEL
        except (LLMError, KeyError, IndexError, TypeError) as exc:
            # Remember the fallback so a server without /models is not asked every turn.
            log.warning("openai: cannot list models (%s); sending %r", exc, FALLBACK_MODEL)
            self._model = FALLBACK_MODEL
        else:
            log.info(
                "openai: no model configured; using %r served by %s", self._model, self._base_url
            )
        return self._model


def to_wire_message(message: ChatMessage) -> dict[str, Any]:
    """One ChatMessage in the Chat Completions request shape."""
    if message.role == "tool":
        if not message.tool_call_id:
            raise LLMError("openai: a tool result message needs its tool_call_id")
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        # OpenAI documents null content for a pure tool-call turn.
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments or "{}"},
            }
            for call in message.tool_calls
        ]
    return wire


def to_wire_tool(tool: ToolSpec) -> dict[str, Any]:
    """One ToolSpec in the Chat Completions ``tools`` shape."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            # Some servers reject a function without a schema; an empty object is valid.
            "parameters": tool.parameters or _EMPTY_SCHEMA,
        },
    }


def parse_completion(data: Any) -> Completion:
    """Read a non-streamed Chat Completions reply."""
    observe_usage(data)
    choice = _first_choice(data)
    if choice is None:
        raise LLMError("openai: the reply has no choices")
    message = choice.get("message") or {}
    calls = tuple(
        ToolCall(
            id=str(call.get("id") or _new_call_id()),
            name=str(call.get("function", {}).get("name", "")),
            arguments=str(call.get("function", {}).get("arguments") or "{}"),
        )
        for call in message.get("tool_calls") or ()
    )
    reason = choice.get("finish_reason") or ("tool_calls" if calls else "stop")
    return Completion(str(message.get("content") or ""), calls, str(reason))


@dataclass(slots=True)
class _PartialCall:
    """A tool call being reassembled from streamed fragments."""

    id: str = ""
    name: str = ""
    arguments: str = ""


class _CallAssembler:
    """Tool calls reassembled from the fragments of a stream, in order of appearance.

    The index ties fragments of one call together. Servers that omit it send whole
    calls; Ollama sends every call of a reply with index 0, so a fragment whose id
    differs from the call at its index starts a new call rather than joining it.
    """

    def __init__(self) -> None:
        self._calls: list[_PartialCall] = []
        self._at: dict[int, _PartialCall] = {}  # the call each server index points at

    def __bool__(self) -> bool:
        return bool(self._calls)

    def merge(self, fragment: Any) -> None:
        """Add one ``delta.tool_calls`` entry."""
        if not isinstance(fragment, dict):
            return
        index = fragment.get("index")
        new_id = str(fragment.get("id") or "")
        call = self._at.get(index) if isinstance(index, int) else None
        if call is None or (new_id and call.id and new_id != call.id):
            call = _PartialCall()
            self._calls.append(call)
            if isinstance(index, int):
                self._at[index] = call
        if new_id and not call.id:
            call.id = new_id
        function = fragment.get("function") or {}
        # Concatenated like the official SDK does: the name arrives once, arguments in pieces.
        if name := function.get("name"):
            call.name += str(name)
        if arguments := function.get("arguments"):
            call.arguments += str(arguments)

    def calls(self) -> tuple[ToolCall, ...]:
        """The finished calls; a missing id is made up, missing arguments are ``{}``."""
        return tuple(
            ToolCall(p.id or _new_call_id(), p.name, p.arguments or "{}") for p in self._calls
        )


async def _decode(events: AsyncIterator[SSEEvent]) -> AsyncGenerator[StreamEvent, None]:
    """Turn Chat Completions SSE chunks into StreamEvents."""
    partial = _CallAssembler()
    reason: str | None = None
    done = False
    async for event in events:
        if event.event == "error":
            # ``event: error`` (OpenAI) or llama-server's ``error:`` line.
            raise LLMError(f"openai: error in stream: {error_text(event.data)[:200]}")
        if event.data.strip() == "[DONE]":
            done = True
            break
        chunk = _parse_chunk(event.data)
        observe_usage(chunk)
        choice = _first_choice(chunk)
        if choice is None:  # e.g. the usage-only chunk of stream_options
            continue
        delta = choice.get("delta") or {}
        if text := delta.get("content"):
            yield TextDelta(str(text))
        for fragment in delta.get("tool_calls") or ():
            partial.merge(fragment)
        reason = choice.get("finish_reason") or reason
    if not done and reason is None:
        # Neither [DONE] nor a finish_reason: the connection was cut mid-reply.
        raise RetryableError("openai: the stream ended before the reply was finished")
    if partial:
        yield ToolCalls(partial.calls())
    yield Finish(reason or ("tool_calls" if partial else "stop"))


def observe_usage(data: Any) -> None:
    """Record the prompt and cached tokens a reply's ``usage`` reports (if it does).

    ``usage.prompt_tokens_details.cached_tokens`` is OpenAI's (and vLLM's) count of the
    prompt read from the server's prefix cache.
    """
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return
    prompt = usage.get("prompt_tokens")
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    if isinstance(prompt, int) and isinstance(cached, int | None):
        observe_prompt_tokens("openai", prompt, cached or 0)


def _parse_chunk(data: str) -> Any:
    try:
        chunk = json.loads(data)
    except UNREADABLE_JSON:
        raise LLMError("openai: the stream carried a chunk that is not JSON") from None
    if isinstance(chunk, dict) and chunk.get("error"):
        # Servers report failures that happen after the 200 inside the stream.
        raise LLMError(f"openai: error in stream: {error_text(data)[:200]}")
    return chunk


def _first_choice(data: Any) -> dict[str, Any] | None:
    if not isinstance(data, dict):
        raise LLMError("openai: the reply is not a JSON object")
    choices = data.get("choices")
    if not choices or not isinstance(choices[0], dict):
        return None
    choice: dict[str, Any] = choices[0]
    return choice


def _new_call_id() -> str:
    # Some local servers omit call ids; the tool result must still point at its call.
    return f"call_{uuid.uuid4().hex[:24]}"
