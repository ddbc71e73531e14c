"""HTTP plumbing of the admin API: JSON errors, bounded bodies, strict parameters.

Every failure is an :class:`ApiError` that becomes ``{"error": {"code", "message"}}``
with a 4xx/5xx status. Bodies and query strings are read into the models of
:mod:`picobot.admin.models` and are strict: an unknown field or parameter is a 400,
because an operator's typo (``?usr=``) must not silently widen what a request reads
or deletes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, TypeAdapter, ValidationError

from picobot.admin.models import Error, ErrorDetail, Query, UserId
from picobot.errors import UNREADABLE_JSON
from picobot.shapes import problem

MAX_BODY_BYTES = 64 * 1024
"""Largest request body accepted (413 above); the biggest legitimate body is one memory."""

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


def json_response(data: BaseModel | Mapping[str, Any], status: int = 200) -> web.Response:
    """A model (serialized by its own rules) or a mapping as UTF-8 JSON, non-ASCII kept."""
    text = (
        data.model_dump_json()
        if isinstance(data, BaseModel)
        else json.dumps(data, ensure_ascii=False)
    )
    return web.Response(
        text=text,
        status=status,
        content_type=JSON_CONTENT_TYPE,
        charset="utf-8",
    )


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    """``{"error": {"code": ..., "message": ...}}`` with ``status``."""
    response = json_response(Error(error=ErrorDetail(code=code, message=message)), status)
    response.headers.update(headers or {})
    return response


# --- request bodies -----------------------------------------------------------------------

M = TypeVar("M", bound=BaseModel)
Q = TypeVar("Q", bound=Query)


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


async def read_model(request: web.Request, model: type[M]) -> M:
    """The JSON object body validated by ``model``.

    Raises 400 for malformed JSON (``invalid_json``), a non-object (``invalid_body``),
    an unknown field (``unknown_field``), a missing one (``missing_field``) or a wrong
    value (``invalid_field``), in that order, and 413 for a body over the limit.
    """
    raw = await read_body(request)
    try:
        data = json.loads(raw)
    except UNREADABLE_JSON:
        raise ApiError(400, "invalid_json", "The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_body", "The request body must be a JSON object.")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        found = problem(exc)
        if found.kind == "unknown":
            raise ApiError(400, "unknown_field", f"Unknown field(s): {found.names}.") from None
        if found.kind == "missing":
            raise ApiError(400, "missing_field", f"Missing field(s): {found.names}.") from None
        message = f"Field {found.fields[0]!r} {found.detail}."
        raise ApiError(400, "invalid_field", message) from None


# --- query strings and path parameters ------------------------------------------------------


def read_query(request: web.Request, model: type[Q]) -> Q:
    """The query string validated by ``model``: each parameter at most once (else 400).

    An empty value counts as absent for a required parameter (``missing_parameter``)
    but is refused for an optional one, so ``?user=`` never widens a listing to all users.
    """
    params: dict[str, str] = {}
    for name, value in request.query.items():
        if name not in model.model_fields:
            raise ApiError(400, "unknown_parameter", f"Unknown query parameter {name!r}.")
        if name in params:
            raise ApiError(400, "invalid_parameter", f"Query parameter {name!r} is repeated.")
        params[name] = value
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        found = problem(exc)
        name = found.fields[0]
        required = model.model_fields[name].is_required() if name in model.model_fields else False
        if found.kind == "missing" or (required and not params.get(name, "").strip()):
            raise ApiError(400, "missing_parameter", f"{name!r} is required.") from None
        raise ApiError(400, "invalid_parameter", f"{name!r} {found.detail}.") from None


_USER_ID: TypeAdapter[str] = TypeAdapter(UserId)


def user_id_value(raw: str | None, where: str = "user") -> str:
    """A user id from the path: the rule of :data:`UserId` (1-256 characters, no control)."""
    if not raw:
        raise ApiError(400, "missing_parameter", f"{where!r} is required.")
    try:
        return _USER_ID.validate_python(raw)
    except ValidationError:
        raise ApiError(400, "invalid_parameter", f"{where!r} is not a valid user id.") from None
