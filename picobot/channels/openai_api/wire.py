"""The OpenAI chat-completions wire format, without I/O: requests in, JSON objects out.

A request is reduced to what PicoBot reads from it: the text of the last message, which
must be the user's, and whether to stream. Everything else a client sends (its earlier
messages, ``system`` prompts, ``temperature``, ``user`` ...) is accepted and ignored:
PicoBot's stored session is the history, and the authenticated key is the user.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "server_error",
}


class WireError(Exception):
    """A request PicoBot refuses: ``status`` and an OpenAI error ``code`` and ``param``."""

    def __init__(
        self, status: int, message: str, *, code: str | None = None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """What PicoBot takes from a chat-completions request."""

    text: str
    stream: bool
    include_usage: bool = False


def error_body(status: int, message: str, code: str | None, param: str | None = None) -> str:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


def parse_chat_request(body: bytes, max_message_bytes: int) -> ChatRequest:
    """Parse a request body; raise :class:`WireError` (400) naming what is wrong."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise WireError(400, "The body is not valid JSON.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise WireError(400, "The body must be a JSON object.", code="invalid_json")
    if not isinstance(data.get("model"), str):
        raise WireError(400, "'model' must be a string.", code="invalid_value", param="model")
    stream = data.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise WireError(400, "'stream' must be a boolean.", code="invalid_value", param="stream")
    n = data.get("n", 1)
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n != 1):
        raise WireError(400, "Only n = 1 is supported.", code="invalid_value", param="n")
    options = data.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError(
            400, "'messages' must be a non-empty array.", code="invalid_value", param="messages"
        )
    last = messages[-1]
    param = f"messages[{len(messages) - 1}]"
    if not isinstance(last, dict) or last.get("role") != "user":
        raise WireError(
            400,
            "The last message must be the user's: PicoBot answers it as a new turn.",
            code="invalid_value",
            param=param,
        )
    text = _text_of(last.get("content"), f"{param}.content")
    if not text.strip():
        raise WireError(400, "The last user message is empty.", code="invalid_value", param=param)
    if len(text.encode("utf-8", "surrogatepass")) > max_message_bytes:
        raise WireError(
            400,
            f"The last user message is longer than {max_message_bytes} bytes.",
            code="message_too_long",
            param=param,
        )
    return ChatRequest(text, stream, include_usage and stream)


def _text_of(content: Any, param: str) -> str:
    """A message's text: a string, or an array of text parts (other parts are refused)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise WireError(
                    400, "Only text content is supported.", code="invalid_value", param=param
                )
            text = part.get("text")
            if not isinstance(text, str):
                raise WireError(400, "A text part needs 'text'.", code="invalid_value", param=param)
            parts.append(text)
        return "\n".join(parts)
    message = "'content' must be a string or an array of text parts."
    raise WireError(400, message, code="invalid_value", param=param)


def completion(completion_id: str, created: int, model: str, content: str) -> dict[str, Any]:
    """A whole (non-streamed) ``chat.completion`` object."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": _usage(),
    }


def chunk(
    completion_id: str,
    created: int,
    model: str,
    *,
    content: str | None = None,
    role: bool = False,
    finish: bool = False,
    usage: bool = False,
) -> str:
    """One SSE event (``data: {...}\\n\\n``) of a ``chat.completion.chunk``.

    ``usage`` makes the trailing chunk of ``stream_options.include_usage``: no choices.
    """
    delta: dict[str, str] = {}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": []
        if usage
        else [
            {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": "stop" if finish else None,
            }
        ],
    }
    if usage:
        body["usage"] = _usage()
    return f"data: {json.dumps(body)}\n\n"


def stream_error(status: int, message: str, code: str | None) -> str:
    """An error inside a stream that has begun: an SSE event holding the error object."""
    return f"data: {error_body(status, message, code)}\n\n"


DONE = "data: [DONE]\n\n"
"""The last line of every stream."""


def models(model: str, created: int) -> dict[str, Any]:
    """The ``/v1/models`` list: the one model this endpoint serves."""
    return {
        "object": "list",
        "data": [{"id": model, "object": "model", "created": created, "owned_by": "picobot"}],
    }


def _usage() -> dict[str, int]:
    # PicoBot builds the prompt itself and counts no tokens of it per request: zeros
    # say "not counted" to clients that need the field present.
    return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
