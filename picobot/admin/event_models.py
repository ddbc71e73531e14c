"""Admin API shapes of the event log and its live stream (see :mod:`picobot.admin.models`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from picobot.admin.models import Query, Response, Timestamp, UserId
from picobot.store.conversation.events import EVENT_TYPES, EventFilter

MAX_EVENTS_PAGE = 500
"""Most events one page of ``GET /api/v1/events`` returns."""

_TYPES = ", ".join(sorted(EVENT_TYPES))


class EventsStreamQuery(Query):
    """``GET /api/v1/events/stream``: which events, from where (every filter narrows)."""

    user: UserId | None = Field(None, description="Only this user's events.")
    session: str | None = Field(
        None, min_length=1, max_length=64, description="Only this session's events."
    )
    type: str | None = Field(None, description=f"Comma-separated event types, any of: {_TYPES}.")
    since: float | None = Field(
        None, ge=0, le=1e11, description="Only events at or after this unix time (seconds)."
    )
    after: int | None = Field(
        None, ge=0, le=2**62, description="Only events with a larger id (the cursor)."
    )

    @field_validator("type")
    @classmethod
    def _known_types(cls, value: str | None) -> str | None:
        if value is None:
            return None
        names = [t.strip() for t in value.split(",") if t.strip()]
        unknown = sorted(set(names) - EVENT_TYPES)
        if not names or unknown:
            raise ValueError(f"names no known event type: {', '.join(unknown) or 'none'}")
        return ",".join(names)

    def filter(self, after: int | None = None) -> EventFilter:
        """The store filter of this query, starting after ``after`` when given."""
        return EventFilter(
            user_id=self.user,
            session_id=self.session,
            types=tuple(self.type.split(",")) if self.type else (),
            since=self.since,
            after_id=self.after if after is None else after,
        )


class EventsQuery(EventsStreamQuery):
    """``GET /api/v1/events``: the stream's filters and a page size."""

    limit: int = Field(100, ge=1, le=MAX_EVENTS_PAGE, description="Page size.")


class Event(Response):
    """One thing that happened: ids and counts, never content.

    ``actor`` is the operator (``cli:<user>``, ``api:<key prefix>``) or ``supervisor``
    when not the user; ``payload`` holds ids and counts by event type (docs/api.md).
    """

    id: int
    at: Timestamp
    type: str
    user_id: str | None
    session_id: str | None
    actor: str | None
    payload: dict[str, Any]


class EventList(Response):
    """Events oldest first; ``next_after`` is the ``after`` of the next page (null: none
    yet; follow new events with the stream, or poll with the last id)."""

    events: list[Event]
    next_after: int | None
