"""Every shape of the admin API, one pydantic model each.

A request model validates a body or a query string (strictly: unknown fields and
parameters are refused); a response model is what a handler builds and serializes;
and :mod:`picobot.admin.openapi` generates the served document's schemas from both,
so the document, the checks and the answers are one definition. Times are unix
seconds inside and ISO 8601 UTC on the wire.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    RootModel,
    StringConstraints,
    TypeAdapter,
    WithJsonSchema,
    create_model,
)

from picobot.privacy.controller import MAX_PURGE_DAYS
from picobot.shapes import STORABLE, Text
from picobot.store.purge import PurgeCounts
from picobot.store.search import MAX_LIMIT as SEARCH_MAX_LIMIT

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
    """The public readiness check (a write commits, the disk has room); reasons are logged."""

    status: Literal["ready", "unavailable"]
    database: Literal["ok", "unavailable"]
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


class SearchHit(Response):
    """A recalled record; a higher ``score`` is a better match."""

    kind: Literal["message", "memory"]
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


# --- retention and purge -----------------------------------------------------------------

# Built from the store's dataclass, so a new kind of purged row is served and documented
# as soon as it exists; mypy sees the common base.
_PurgeCounts = create_model(
    "PurgeCounts",
    __base__=Response,
    __doc__="Rows by kind, and their total.",
    **{f.name: (int, ...) for f in fields(PurgeCounts)},  # type: ignore[call-overload]
    total=(int, ...),
)
if TYPE_CHECKING:
    Counts: TypeAlias = Response
else:
    Counts = _PurgeCounts


def counts(value: PurgeCounts) -> Counts:
    """The API shape of purge counts."""
    shape = {f.name: int(getattr(value, f.name)) for f in fields(value)}
    return cast(Counts, _PurgeCounts(**shape, total=value.total))


class RetentionConfig(Response):
    """The ``[session.retention]`` settings in force, and the batch size of deletes."""

    max_age_days: int
    cleanup_interval_secs: int
    erase_interval_secs: int
    batch_size: int


class RetentionRun(Response):
    """The last recorded run; ``unfinished``: started and never finished (running or killed)."""

    started_at: Timestamp | None
    finished_at: Timestamp | None
    ok: bool | None
    unfinished: bool
    result: str | None
    error: str | None


class Erasure(Response):
    """Rows deleted by retention are gone at once; the rewrite that erases their leftover
    bytes runs at most every erase_interval_secs. purge_residue_since: the start of a
    purge that failed or was cut short before its erasure; the next retention run erases
    what it left."""

    last_erased_at: Timestamp | None
    residue_waiting_since: Timestamp | None
    erase_due: Timestamp | None
    purge_residue_since: Timestamp | None


class Retention(Response):
    """Retention config, the last recorded run, and what has expired at this moment."""

    config: RetentionConfig
    last_run: RetentionRun | None
    erasure: Erasure
    scheduled: bool
    cutoff: Timestamp
    expired_now: Counts


class SessionPurge(Request):
    """Purge one session with its messages, summary, index entries and tool records."""

    scope: Literal["session"]
    session_id: Text


class UserPurge(Request):
    """Purge every session, message, summary, memory, index entry and tool record of a user."""

    scope: Literal["user"]
    user_id: UserId = Field(description="A user id, e.g. telegram:42.")


class OlderThanPurge(Request):
    """Purge conversation data older than ``days``; memories are kept."""

    scope: Literal["older_than"]
    days: int = Field(ge=1, le=MAX_PURGE_DAYS)


class PurgeRequest(RootModel[SessionPurge | UserPurge | OlderThanPurge]):
    """A purge to plan: the scope and exactly its one target field."""

    root: Annotated[SessionPurge | UserPurge | OlderThanPurge, Field(discriminator="scope")]


class SessionPlan(SessionPurge):
    """What a session purge will delete."""

    counts: Counts
    prompt: str


class UserPlan(UserPurge):
    """What a user purge will delete."""

    counts: Counts
    prompt: str


class OlderThanPlan(OlderThanPurge):
    """What an older-than purge will delete."""

    counts: Counts
    prompt: str


Plan = Annotated[SessionPlan | UserPlan | OlderThanPlan, Field(discriminator="scope")]
_PLAN: TypeAdapter[SessionPlan | UserPlan | OlderThanPlan] = TypeAdapter(Plan)


def plan(
    request: PurgeRequest, value: PurgeCounts, prompt: str
) -> SessionPlan | UserPlan | OlderThanPlan:
    """The plan of a purge request: its scope and target, the counts and the prompt."""
    return _PLAN.validate_python(
        {**request.root.model_dump(), "counts": counts(value), "prompt": prompt}
    )


class PurgePlan(Response):
    """A planned purge; ``confirm_token`` and ``expires_at`` are null when nothing matches."""

    confirm_token: str | None
    plan: Plan
    expires_at: Timestamp | None


class ConfirmRequest(Request):
    """The answer to a planned purge."""

    answer: Text = Field(description="y or yes (any case) deletes; anything else cancels.")


class PurgeDone(Response):
    """What the confirmed purge deleted."""

    deleted: Counts
    duration_secs: float
    summary: str


class PurgeCancelled(Response):
    """The purge was cancelled; nothing was deleted."""

    cancelled: Literal[True]


class ConfirmResult(RootModel[PurgeDone | PurgeCancelled]):
    """Deleted counts, or cancelled."""

    root: PurgeDone | PurgeCancelled


class NoQuery(Query):
    """A route that takes no query parameter (any parameter is refused)."""
