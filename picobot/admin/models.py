"""Every shape of the admin API, one pydantic model each.

A request model validates a body or a query string (strictly: unknown fields and
parameters are refused); a response model is what a handler builds and serializes;
and :mod:`picobot.admin.openapi` generates the served document's schemas from both,
so the document, the checks and the answers are one definition. Times are unix
seconds inside and ISO 8601 UTC on the wire.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    WithJsonSchema,
)

from picobot.shapes import STORABLE, Text
from picobot.store.retrieval.search import MAX_LIMIT as SEARCH_MAX_LIMIT

MAX_PAGE = 200
"""Most sessions or messages one page returns."""

MAX_USER_ID_CHARS = 256


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


Timestamp = Annotated[
    float,
    PlainSerializer(_iso, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""Unix seconds, served as ISO 8601 UTC."""

UserId = Annotated[
    str,
    # Control characters (Unicode category Cc) would forge log lines and file names.
    StringConstraints(
        min_length=1, max_length=MAX_USER_ID_CHARS, pattern=r"^[^\x00-\x1f\x7f-\x9f]*$"
    ),
    STORABLE,
]
"""A user id, e.g. ``telegram:42``: 1-256 characters, none of them a control character."""


class Request(BaseModel):
    """A request body: strict types (``"5"`` is not 5, ``true`` is not 1), no unknown field."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Query(BaseModel):
    """A query string: values arrive as text, so numbers are parsed; no unknown parameter."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Response(BaseModel):
    """An answer: closed, so the document lists every field a client can see.

    Built from a store record with ``model_validate(record)``: the fields are read
    from its attributes, so the record's other attributes stay out of the answer.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, from_attributes=True)


# --- errors and health -------------------------------------------------------------------


class ErrorDetail(Response):
    """A stable machine-readable ``code`` and a message for people."""

    code: str
    message: str


class Error(Response):
    """Every 4xx/5xx answer of the API (codes in docs/api.md)."""

    error: ErrorDetail


class Health(Response):
    """The public health check; the reason of a failure is only logged."""

    status: Literal["ok", "unavailable"]
    database: Literal["ok", "unavailable"]


class Readiness(Response):
    """The public readiness check (a write commits, the schema is this version's, the disk
    has room); reasons are logged."""

    status: Literal["ready", "unavailable"]
    database: Literal["ok", "unavailable"]
    migrations: Literal["ok", "pending", "newer", "unknown"]
    disk: Literal["ok", "low"]


# --- sessions and messages ---------------------------------------------------------------

Limit = Annotated[int, Field(ge=1, le=MAX_PAGE, description="Page size.")]


class SessionsQuery(Query):
    """``GET /api/v1/sessions``."""

    user: UserId | None = Field(None, description="Only this user's sessions.")
    limit: Limit = 50
    offset: int = Field(0, ge=0, le=2**31, description="Sessions to skip.")


class SessionQuery(Query):
    """``GET /api/v1/sessions/{id}``."""

    limit: Limit = 50
    before_seq: int | None = Field(
        None,
        ge=1,
        le=2**62,
        description="Only messages with seq_order below this (next_before_seq pages back).",
    )


class Session(Response):
    """A session and how many messages it holds."""

    id: str
    user_id: str
    channel: str
    chat_id: str
    parent_session_id: str | None
    created_at: Timestamp
    last_active: Timestamp
    message_count: int


class SessionList(Response):
    """A page of sessions, most recently active first; ``next_offset`` null on the last."""

    sessions: list[Session]
    limit: int
    offset: int
    next_offset: int | None


class Message(Response):
    """One stored message."""

    seq_order: int
    role: str
    content: str
    token_estimate: int
    created_at: Timestamp


class SessionDetail(Response):
    """A session and one page of its messages, oldest first; ``next_before_seq`` pages back."""

    session: Session
    messages: list[Message]
    next_before_seq: int | None


# --- memories and search ----------------------------------------------------------------


class Memory(Response):
    """A user memory (the owner is in the URL)."""

    key: str
    content: str
    created_at: Timestamp
    updated_at: Timestamp


class MemoryList(Response):
    """A user's memories, most recently updated first."""

    user_id: str
    memories: list[Memory]


_KEY_RULE = "^[a-z][a-z0-9_]*$, at most 64 characters; system_ and internal_ are reserved."


class MemoryCreate(Request):
    """A new memory; the key and content rules are those of /remember (400 ``invalid``)."""

    key: Text = Field(description=_KEY_RULE)
    content: Text = Field(description="Stripped; not empty; at most max_memory_chars.")


class MemoryUpdate(Request):
    """The new content of an existing memory."""

    content: Text = Field(description="Stripped; not empty; at most max_memory_chars.")


class SearchQuery(Query):
    """``GET /api/v1/search``."""

    user: UserId = Field(description="Whose records to search.")
    q: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)] = Field(
        description="Search text; keywords are extracted from it."
    )
    limit: int = Field(10, ge=1, le=SEARCH_MAX_LIMIT, description="Most hits.")
    type: str | None = Field(
        None,
        description="Comma-separated kinds to search: messages, notes, facts, reflections"
        " (reflections include digests). Default: all of them.",
    )
    session: str | None = Field(
        None, description="Only this session's records (its messages and reflections)."
    )
    since: str | None = Field(
        None,
        description="Only records written from this time on: an age (7d, 12h, 2w) or an"
        " ISO 8601 date or time (UTC unless it has an offset).",
    )


class SearchHit(Response):
    """A recalled record; a higher ``score`` is a better match."""

    kind: Literal["message", "memory", "fact", "reflection", "digest"]
    session_id: str | None
    seq_order: int | None
    text: str
    created_at: Timestamp
    score: float


class SearchResult(Response):
    """The keywords searched (``terms``) and the hits, best first."""

    user_id: str
    terms: list[str]
    hits: list[SearchHit]
    took_ms: float = Field(description="How long the search took, in milliseconds.")


class NoQuery(Query):
    """A route that takes no query parameter (any parameter is refused)."""
