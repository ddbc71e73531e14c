"""The events table: written in the caller's transaction, read back in order by filter."""

from __future__ import annotations

import sqlite3

import pytest

from picobot.store.db import Database
from picobot.store.events import EventFilter, latest_event_id, list_events, record_event


async def test_events_are_read_back_in_order_and_filtered(db: Database) -> None:
    def write(conn: sqlite3.Connection) -> list[int]:
        return [
            record_event(conn, "session.started", 10.0, user_id="u1", session_id="s1"),
            record_event(
                conn, "message.appended", 11.0, user_id="u1", session_id="s1", payload={"n": 1}
            ),
            record_event(conn, "session.started", 12.0, user_id="u2", session_id="s2"),
            record_event(conn, "retention.completed", 13.0, actor="supervisor"),
        ]

    ids = await db.write(write)
    assert ids == sorted(ids)
    every = await db.read(lambda c: list_events(c, EventFilter(), 100))
    assert [e.id for e in every] == ids
    mine = await db.read(lambda c: list_events(c, EventFilter(user_id="u1"), 100))
    assert [(e.type, e.payload) for e in mine] == [
        ("session.started", {}),
        ("message.appended", {"n": 1}),
    ]
    started = EventFilter(types=("session.started",), after_id=ids[0])
    later = await db.read(lambda c: list_events(c, started, 100))
    assert [e.user_id for e in later] == ["u2"]
    recent = await db.read(lambda c: list_events(c, EventFilter(since=12.5), 100))
    assert [(e.type, e.actor) for e in recent] == [("retention.completed", "supervisor")]
    assert await db.read(latest_event_id) == ids[-1]


async def test_an_event_rolls_back_with_its_transaction(db: Database) -> None:
    def fail(conn: sqlite3.Connection) -> None:
        record_event(conn, "session.started", 1.0, user_id="u1")
        raise RuntimeError("the change it records failed")

    with pytest.raises(RuntimeError):
        await db.write(fail)
    assert await db.read(lambda c: list_events(c, EventFilter(), 10)) == []


def test_an_unknown_type_is_refused() -> None:
    conn = sqlite3.connect(":memory:")
    with pytest.raises(ValueError, match="unknown event type"):
        record_event(conn, "message.sent", 1.0)
