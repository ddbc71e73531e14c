"""Admin API shapes of retention and purges (see :mod:`picobot.admin.models`)."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias, cast

from pydantic import Field, RootModel, TypeAdapter, create_model

from picobot.admin.fact_models import FactCriteria, FactId
from picobot.admin.models import Request, Response, Timestamp, UserId
from picobot.privacy.fact_scope import MAX_CHOSEN_FACTS
from picobot.privacy.scopes import MAX_PURGE_DAYS
from picobot.shapes import Text
from picobot.store.erasure.purge import PurgeCounts

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


class FactsPurge(FactCriteria, Request):
    """Purge chosen learned facts with their sources, history and index entries: those
    with the given ``ids`` that match every criterion given; at least one is needed. The
    facts are chosen when planned: ones matching only later are not deleted."""

    scope: Literal["facts"]
    ids: list[FactId] = Field(
        default_factory=list, max_length=MAX_CHOSEN_FACTS, description="Fact ids."
    )


class MessagePurge(Request):
    """Purge one message with what was derived from it: its index entries and vector,
    the tool records of its turn, the session's summary if it covered it, the facts
    learned only from it (others lose it as a source) and the session's reflections
    (rebuilt from what remains)."""

    scope: Literal["message"]
    message_id: int = Field(ge=1, le=2**63 - 1, description="A message id.")


AnyPurge: TypeAlias = SessionPurge | UserPurge | OlderThanPurge | FactsPurge | MessagePurge


class PurgeRequest(RootModel[AnyPurge]):
    """A purge to plan: the scope and exactly its one target field (facts: criteria)."""

    root: Annotated[AnyPurge, Field(discriminator="scope")]


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


class FactsPlan(FactsPurge):
    """What a purge of chosen facts will delete, and how many users own them."""

    counts: Counts
    users: int
    prompt: str


class MessagePlan(MessagePurge):
    """What a purge of one message will delete."""

    counts: Counts
    prompt: str


AnyPlan: TypeAlias = SessionPlan | UserPlan | OlderThanPlan | FactsPlan | MessagePlan
Plan = Annotated[AnyPlan, Field(discriminator="scope")]
_PLAN: TypeAdapter[AnyPlan] = TypeAdapter(Plan)


def plan(request: PurgeRequest, value: PurgeCounts, prompt: str, **extra: int) -> AnyPlan:
    """The plan of a purge request: its scope and target, the counts and the prompt
    (``extra``: what the scope adds, e.g. ``users`` of a facts purge)."""
    return _PLAN.validate_python(
        {**request.root.model_dump(), "counts": counts(value), "prompt": prompt, **extra}
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
