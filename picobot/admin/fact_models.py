"""Admin API shapes of learned facts, and the documented operations of their routes.

The criteria of a listing (``GET /api/v1/facts``) and of a bulk delete (the ``facts``
scope of ``POST /api/v1/purge``) are one model, :class:`FactCriteria`, and both become
the store's filter through :func:`picobot.store.learned.facts.operator_filter`, as the CLI's do.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field, StringConstraints, WithJsonSchema
from pydantic_core import PydanticCustomError

from picobot.admin.models import MAX_PAGE, Query, Request, Response, Timestamp, UserId
from picobot.admin.operation import TOO_LARGE, Operation, Reply, error_reply
from picobot.shapes import STORABLE, Text
from picobot.store.learned.fact_rules import CATEGORIES, MAX_FACT_WORDS, MAX_SUBJECT_CHARS
from picobot.store.learned.facts import FactFilter, operator_filter

_ALLOWED = "one of " + ", ".join(repr(c) for c in CATEGORIES)


def _category(value: str) -> str:
    # Reported like a Literal's refusal, so the message lists the allowed values.
    if value not in CATEGORIES:
        raise PydanticCustomError(
            "literal_error", "Input should be {expected}", {"expected": _ALLOWED}
        )
    return value


Category = Annotated[
    str,
    AfterValidator(_category),
    WithJsonSchema({"type": "string", "enum": list(CATEGORIES)}),
]
Confidence = Annotated[float, Field(ge=0.0, le=1.0)]
FactId = Annotated[int, Field(ge=1, le=2**62)]
Needle = Annotated[str, StringConstraints(min_length=1, max_length=200), STORABLE]
_TEXT_RULE = f"One line; longer than {MAX_FACT_WORDS} words is cut to {MAX_FACT_WORDS}."
_SUBJECT_RULE = f"What or whom it is about, stored lowercase, at most {MAX_SUBJECT_CHARS} chars."


class FactCriteria(BaseModel):
    """Which facts: every criterion given must match (none given: every fact)."""

    user: UserId | None = Field(None, description="Only this user's facts.")
    subject: Needle | None = Field(None, description="Only facts about this subject.")
    category: Category | None = Field(None, description="Only this category.")
    active: bool | None = Field(None, description="Only active (true) or inactive facts.")
    pinned: bool | None = Field(None, description="Only pinned (true) or unpinned facts.")
    min_confidence: Confidence | None = Field(None, description="Confidence at least this.")
    max_confidence: Confidence | None = Field(None, description="Confidence at most this.")
    text: Needle | None = Field(
        None, description="A piece of the text or subject (case-insensitive)."
    )

    def where(self, ids: tuple[int, ...] = ()) -> FactFilter:
        """The store filter (UserError for an empty confidence range)."""
        return operator_filter(
            user_id=self.user,
            subject=self.subject,
            category=self.category,
            active=self.active,
            pinned=self.pinned,
            min_confidence=self.min_confidence,
            max_confidence=self.max_confidence,
            text=self.text,
            ids=ids,
        )


class FactsQuery(FactCriteria, Query):
    """``GET /api/v1/facts``."""

    limit: int = Field(50, ge=1, le=MAX_PAGE, description="Page size.")
    cursor: Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]{0,17}$")] | None = Field(
        None, description="The next_cursor of the previous page."
    )


class Fact(Response):
    """A learned fact (see docs/learning.md)."""

    id: int
    user_id: str
    subject: str | None
    category: str
    text: str
    confidence: float
    active: bool
    pinned: bool
    created_at: Timestamp
    updated_at: Timestamp


class FactList(Response):
    """A page of facts, newest first; ``next_cursor`` null on the last page."""

    facts: list[Fact]
    limit: int
    next_cursor: str | None


class FactSource(Response):
    """Where a fact was learned or confirmed; no session: an operator made it."""

    session_id: str | None
    message_id: int | None
    created_at: Timestamp


class FactChange(Response):
    """One change: when, why, the values before and after, and who (an operator's id)."""

    at: Timestamp
    reason: str
    old_text: str | None
    new_text: str | None
    old_confidence: float | None
    new_confidence: float | None
    old_active: bool | None
    new_active: bool | None
    session_id: str | None
    actor: str | None


class FactDetail(Response):
    """A fact with its sources and its history, oldest first."""

    fact: Fact
    sources: list[FactSource]
    history: list[FactChange]


class FactCreate(Request):
    """A new fact for a user; recorded as the operator's (no session provenance)."""

    user_id: UserId = Field(description="Whose fact it is, e.g. telegram:42.")
    category: Category
    subject: Text | None = Field(None, description=_SUBJECT_RULE)
    text: Text = Field(description=_TEXT_RULE)
    confidence: Confidence | None = Field(None, description="Default: a new fact's (0.7).")


class FactUpdate(Request):
    """What to change; at least one field. A new confidence sets the active flag by the
    threshold unless ``active`` is given too."""

    text: Text | None = Field(None, description=_TEXT_RULE)
    confidence: Confidence | None = None
    active: bool | None = None
    pinned: bool | None = Field(None, description="A pinned fact never decays.")


_FACT = {"id": "A fact id (a number)."}
NO_FACT = error_reply("No such fact.")

FACT_OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "get",
        "/api/v1/facts",
        "List learned facts across users, newest first, with filters",
        {200: Reply("A page of facts.", FactList)},
        query=FactsQuery,
    ),
    Operation(
        "post",
        "/api/v1/facts",
        "Create a fact for a user",
        {201: Reply("Created.", Fact), 413: TOO_LARGE},
        body=FactCreate,
    ),
    Operation(
        "get",
        "/api/v1/facts/{id}",
        "One fact with its sources and history",
        {200: Reply("The fact.", FactDetail), 404: NO_FACT},
        path_params=_FACT,
    ),
    Operation(
        "patch",
        "/api/v1/facts/{id}",
        "Change a fact's text, confidence, active flag or pin",
        {200: Reply("Updated.", Fact), 404: NO_FACT, 413: TOO_LARGE},
        body=FactUpdate,
        path_params=_FACT,
    ),
    Operation(
        "delete",
        "/api/v1/facts/{id}",
        "Delete a fact with its sources and history",
        {204: Reply("Deleted."), 404: NO_FACT},
        path_params=_FACT,
    ),
)
