"""HTTP plumbing of the admin API: JSON errors, bounded bodies, strict parameters.

Every failure is an :class:`ApiError` that becomes ``{"error": {"code", "message"}}``
with a 4xx/5xx status. Bodies and query strings are strict: an unknown field or
parameter is a 400, because an operator's typo (``?usr=``) must not silently widen
what a request reads or deletes.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from picobot.errors import UNREADABLE_JSON
from picobot.messages import storable
from picobot.store.memories import Memory
from picobot.store.purge import PurgeCounts
from picobot.store.search import SearchHit
from picobot.store.sessions import SessionInfo

MAX_BODY_BYTES = 64 * 1024
"""Largest request body accepted (413 above); the biggest legitimate body is one memory."""

MAX_USER_ID_CHARS = 256

JSON_CONTENT_TYPE = "application/json"


class ApiError(Exception):
    """A request that cannot be served; rendered as a JSON error with ``status``."""

    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})

    def response(self) -> web.Response:
        """The JSON error response."""
        return error_response(self.status, self.code, self.message, self.headers)


class StreamAborted(Exception):
    """A streamed response failed after its headers were sent; the connection must drop."""


def json_response(data: Any, status: int = 200) -> web.Response:
    """``data`` as UTF-8 JSON (non-ASCII kept readable)."""
    return web.Response(
        text=json.dumps(data, ensure_ascii=False),
        status=status,
        content_type=JSON_CONTENT_TYPE,
        charset="utf-8",
    )


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    """``{"error": {"code": ..., "message": ...}}`` with ``status``."""
    response = json_response({"error": {"code": code, "message": message}}, status)
    response.headers.update(headers or {})
    return response


def iso(ts: float | None) -> str | None:
    """Unix time as ISO 8601 UTC, or None."""
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


# --- request bodies -----------------------------------------------------------------------


async def read_body(request: web.Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The raw body, refused with 413 past ``limit`` bytes without reading it all.

    The app's ``client_max_size`` belongs to whoever builds the shared Application (the
    webhooks need more), so the admin limit is enforced here, on the stream.
    """
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.read(16 * 1024):
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "body_too_large", f"The request body is larger than {limit} bytes.")


async def read_json(
    request: web.Request, fields: Mapping[str, type], required: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """A JSON object body whose keys are among ``fields`` (name -> str or int).

    Raises 400 for malformed JSON, a non-object, an unknown or missing field or a value
    of the wrong type, and 413 for a body over the limit.
    """
    raw = await read_body(request)
    try:
        data = json.loads(raw)
    except UNREADABLE_JSON:
        raise ApiError(400, "invalid_json", "The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_body", "The request body must be a JSON object.")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ApiError(400, "unknown_field", f"Unknown field(s): {', '.join(unknown)}.")
    missing = sorted(required - set(data))
    if missing:
        raise ApiError(400, "missing_field", f"Missing field(s): {', '.join(missing)}.")
    for name, value in data.items():
        kind = fields[name]
        # bool is an int subclass; "days": true is a client bug, not 1 day.
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ApiError(400, "invalid_field", f"Field {name!r} must be {_kind_name(kind)}.")
        if isinstance(value, str) and not storable(value):
            raise ApiError(400, "invalid_field", f"Field {name!r} is not valid Unicode.")
    return data


def _kind_name(kind: type) -> str:
    return {str: "a string", int: "an integer"}.get(kind, kind.__name__)


# --- query strings --------------------------------------------------------------------------


def query(request: web.Request, allowed: frozenset[str]) -> dict[str, str]:
    """The query parameters, each at most once and all among ``allowed`` (else 400)."""
    params: dict[str, str] = {}
    for name, value in request.query.items():
        if name not in allowed:
            raise ApiError(400, "unknown_parameter", f"Unknown query parameter {name!r}.")
        if name in params:
            raise ApiError(400, "invalid_parameter", f"Query parameter {name!r} is repeated.")
        params[name] = value
    return params


def int_param(
    params: Mapping[str, str], name: str, *, default: int | None, minimum: int, maximum: int
) -> int | None:
    """An integer parameter within ``[minimum, maximum]``, ``default`` when absent."""
    raw = params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "invalid_parameter", f"{name!r} must be an integer.") from None
    if not minimum <= value <= maximum:
        raise ApiError(
            400, "invalid_parameter", f"{name!r} must be between {minimum} and {maximum}."
        )
    return value


def user_id_value(raw: str | None, where: str = "user") -> str:
    """A user id from a path or parameter: 1-256 characters, no control characters."""
    if not raw:
        raise ApiError(400, "missing_parameter", f"{where!r} is required.")
    if len(raw) > MAX_USER_ID_CHARS or any(unicodedata.category(c) == "Cc" for c in raw):
        raise ApiError(400, "invalid_parameter", f"{where!r} is not a valid user id.")
    return raw


# --- serializers ---------------------------------------------------------------------------


def session_json(info: SessionInfo) -> dict[str, Any]:
    """A session as the API shows it."""
    return {
        "id": info.id,
        "user_id": info.user_id,
        "channel": info.channel,
        "chat_id": info.chat_id,
        "parent_session_id": info.parent_session_id,
        "created_at": iso(info.created_at),
        "last_active": iso(info.last_active),
        "message_count": info.message_count,
    }


def memory_json(memory: Memory) -> dict[str, Any]:
    """A memory as the API shows it (the owner is in the URL)."""
    return {
        "key": memory.key,
        "content": memory.content,
        "created_at": iso(memory.created_at),
        "updated_at": iso(memory.updated_at),
    }


def hit_json(hit: SearchHit) -> dict[str, Any]:
    """A search hit as the API shows it."""
    return {
        "kind": hit.kind,
        "session_id": hit.session_id,
        "seq_order": hit.seq_order,
        "text": hit.text,
        "created_at": iso(hit.created_at),
        "score": hit.score,
    }


def counts_json(counts: PurgeCounts) -> dict[str, int]:
    """Purge counts by kind (every field of PurgeCounts), plus their total."""
    return {f.name: int(getattr(counts, f.name)) for f in fields(counts)} | {"total": counts.total}
