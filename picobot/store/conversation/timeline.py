"""A session's timeline: its messages, tool calls, summary, learned facts and events.

Read from one snapshot (:meth:`Database.read`) and merged in time order, ties kept in
the order the kinds are listed here, so an operator sees what happened in a session
the way it happened. Nothing here writes.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from picobot.store.conversation.events import EventFilter, list_events
from picobot.store.conversation.summaries import get_summary

MAX_ITEMS = 2000
"""Most rows of each kind one timeline reads (a longer session shows its start and
says it is cut short)."""


@dataclass(frozen=True, slots=True)
class TimelineItem:
    """One thing that happened: ``kind`` is message, tool, summary, fact or event."""

    at: float
    kind: str
    title: str
    body: str = ""
    details: dict[str, str] = field(default_factory=dict)
    message_id: int | None = None
    """The message's id (messages only): what the dashboard's delete action names."""


@dataclass(frozen=True, slots=True)
class Timeline:
    """A session's items, oldest first; ``truncated`` when a kind had more than the limit
    (then its latest rows are missing)."""

    items: list[TimelineItem]
    truncated: bool


SHOWN_AS_ITEMS = ("message.appended", "tool.completed", "fact.created")
"""Event types the timeline leaves out: the message, tool record or fact is shown."""


def session_timeline(conn: sqlite3.Connection, session_id: str, limit: int = MAX_ITEMS) -> Timeline:
    """Everything stored about ``session_id``, oldest first, at most ``limit`` of each kind."""
    items: list[TimelineItem] = []
    truncated = False

    def capped(rows: list[sqlite3.Row]) -> list[sqlite3.Row]:
        # Each query asks for one row more than it shows: that row says it was cut.
        nonlocal truncated
        truncated = truncated or len(rows) > limit
        return rows[:limit]

    for r in capped(
        conn.execute(
            "SELECT id, seq_order, role, picobot_open(content) AS content, created_at FROM messages"
            " WHERE session_id = ?"
            " ORDER BY seq_order LIMIT ?",
            (session_id, limit + 1),
        ).fetchall()
    ):
        items.append(
            TimelineItem(
                float(r["created_at"]),
                "message",
                str(r["role"]),
                str(r["content"]),
                {"seq": str(r["seq_order"])},
                int(r["id"]),
            )
        )
    for r in capped(
        conn.execute(
            "SELECT picobot_open(name) AS name, picobot_open(arguments) AS arguments,"
            " picobot_open(result) AS result, ok, created_at FROM tool_records"
            " WHERE session_id = ? ORDER BY id LIMIT ?",
            (session_id, limit + 1),
        ).fetchall()
    ):
        items.append(
            TimelineItem(
                float(r["created_at"]),
                "tool",
                str(r["name"]),
                str(r["result"]),
                {"arguments": str(r["arguments"]), "ok": "yes" if r["ok"] else "no"},
            )
        )
    summary = get_summary(conn, session_id)
    if summary is not None:
        items.append(
            TimelineItem(
                summary.updated_at,
                "summary",
                f"summary of messages 1-{summary.covered_seq}",
                summary.summary,
            )
        )
    for r in capped(
        conn.execute(
            "SELECT f.id, picobot_open(f.subject) AS subject, f.category,"
            " picobot_open(f.text) AS text, f.confidence, f.active,"
            " MIN(s.created_at) AS at FROM fact_sources s JOIN facts f ON f.id = s.fact_id"
            " WHERE s.session_id = ? GROUP BY f.id ORDER BY at LIMIT ?",
            (session_id, limit + 1),
        ).fetchall()
    ):
        subject = f"{r['subject']}: " if r["subject"] else ""
        items.append(
            TimelineItem(
                float(r["at"]),
                "fact",
                f"fact {r['id']} ({r['category']})",
                subject + str(r["text"]),
                {
                    "confidence": f"{float(r['confidence']):.2f}",
                    "active": "yes" if r["active"] else "no",
                },
            )
        )
    events = list_events(
        conn, EventFilter(session_id=session_id, exclude_types=SHOWN_AS_ITEMS), limit + 1
    )
    truncated = truncated or len(events) > limit
    for event in events[:limit]:
        details = {k: str(v) for k, v in sorted(event.payload.items())}
        if event.actor:
            details["actor"] = event.actor
        items.append(TimelineItem(event.at, "event", event.type, "", details))
    order = {"message": 0, "tool": 1, "summary": 2, "fact": 3, "event": 4}
    return Timeline(sorted(items, key=lambda i: (i.at, order[i.kind])), truncated)
