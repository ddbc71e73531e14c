"""The events table: written in the caller's transaction, read back in order by filter."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from picobot.store.conversation.events import (
    EventFilter,
    latest_event_id,
    list_events,
    record_event,
)
from picobot.store.db import Database
from picobot.store.migrations import MIGRATIONS, apply_migrations
from picobot.store.migrations.events import m017_events_autoincrement


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


async def test_ids_are_never_reused_after_the_newest_events_are_deleted(db: Database) -> None:
    # A purge deletes the newest events; a cursor past them must still see what follows.
    def write(conn: sqlite3.Connection) -> list[int]:
        return [
            record_event(conn, "session.started", 1.0, user_id="u1", session_id="s1"),
            record_event(conn, "session.started", 2.0, user_id="u2", session_id="s2"),
            record_event(conn, "message.appended", 3.0, user_id="u2", session_id="s2"),
        ]

    ids = await db.write(write)
    cursor = await db.read(latest_event_id)

    def purge(conn: sqlite3.Connection) -> int:
        conn.execute("DELETE FROM events WHERE user_id = 'u2'")
        return record_event(conn, "purge.completed", 4.0, actor="operator")

    completed = await db.write(purge)
    assert completed > max(ids)
    after = await db.read(lambda c: list_events(c, EventFilter(after_id=cursor), 10))
    assert [e.type for e in after] == ["purge.completed"]


async def test_the_autoincrement_migration_keeps_rows_ids_and_indexes(tmp_path: Path) -> None:
    before = MIGRATIONS[: MIGRATIONS.index(m017_events_autoincrement)]
    db = await Database.open(tmp_path / "old.db", migrate=False)
    try:
        await apply_migrations(db, before)

        def write(conn: sqlite3.Connection) -> list[int]:
            return [
                record_event(conn, "session.started", 1.0, user_id="u1", session_id="s1"),
                record_event(conn, "memory.saved", 2.0, user_id="u1", payload={"memory_id": 4}),
                record_event(conn, "retention.completed", 3.0, actor="supervisor"),
            ]

        ids = await db.write(write)
        await db.write(lambda c: c.execute("DELETE FROM events WHERE id = ?", (ids[0],)))
        old = await db.read(lambda c: list_events(c, EventFilter(), 10))
        assert (await apply_migrations(db))[0] == "m017_events_autoincrement"

        assert await db.read(lambda c: list_events(c, EventFilter(), 10)) == old
        seq = await db.fetchone("SELECT seq FROM sqlite_sequence WHERE name = 'events'")
        assert seq is not None and seq[0] == ids[-1]
        indexes = await db.fetchall(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events'"
        )
        assert {r["name"] for r in indexes} == {
            "events_by_user",
            "events_by_session",
            "events_by_type",
            "events_by_age",
        }
        await db.write(lambda c: c.execute("DELETE FROM events WHERE id = ?", (ids[-1],)))
        new = await db.write(lambda c: record_event(c, "session.started", 4.0, user_id="u2"))
        assert new == ids[-1] + 1
    finally:
        await db.close()
