"""Each user's privacy switches: whether the bot may learn from them and recall for them.

A user without a row has both on (the defaults). The readers take a connection so the
prompt builder and the learning writes check the switch in the same snapshot or
transaction as the rest of their work: a switch takes effect from the next read.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, replace
from typing import Literal

from picobot.store.db import Database

Switch = Literal["learning", "recall"]
SWITCHES: tuple[Switch, ...] = ("learning", "recall")


@dataclass(frozen=True, slots=True)
class Preferences:
    """One user's switches (both on unless the user turned one off)."""

    learning: bool = True
    recall: bool = True


def read_preferences(conn: sqlite3.Connection, user_id: str) -> Preferences:
    """``user_id``'s switches, the defaults when they never changed one."""
    row = conn.execute(
        "SELECT learning, recall FROM user_preferences WHERE user_id = ?", (user_id,)
    ).fetchone()
    return Preferences() if row is None else Preferences(bool(row[0]), bool(row[1]))


def learning_allowed(conn: sqlite3.Connection, user_id: str) -> bool:
    """Whether the bot may learn about ``user_id`` (facts, markers, reflections)."""
    return read_preferences(conn, user_id).learning


def delete_preferences(conn: sqlite3.Connection, user_id: str) -> int:
    """Forget ``user_id``'s switches (a user purge); how many rows went."""
    return conn.execute("DELETE FROM user_preferences WHERE user_id = ?", (user_id,)).rowcount


def preference_rows(conn: sqlite3.Connection, user_id: str) -> list[tuple[bool, bool, float]]:
    """``user_id``'s stored row as (learning, recall, updated_at), for the export."""
    rows = conn.execute(
        "SELECT learning, recall, updated_at FROM user_preferences WHERE user_id = ?", (user_id,)
    ).fetchall()
    return [(bool(r[0]), bool(r[1]), float(r[2])) for r in rows]


class PreferenceStore:
    """Reads and changes the users' switches."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def get(self, user_id: str) -> Preferences:
        """``user_id``'s switches."""
        return await self._db.read(lambda conn: read_preferences(conn, user_id))

    async def set(self, user_id: str, switch: Switch, on: bool, now: float) -> bool:
        """Turn ``switch`` on or off for ``user_id``; whether it changed."""
        if switch not in SWITCHES:
            raise ValueError(f"unknown switch {switch!r}")

        def write(conn: sqlite3.Connection) -> bool:
            before = read_preferences(conn, user_id)
            if getattr(before, switch) == on:
                return False
            after = replace(before, **{switch: on})
            conn.execute(
                "INSERT INTO user_preferences (user_id, learning, recall, updated_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (user_id) DO UPDATE SET"
                " learning = excluded.learning, recall = excluded.recall,"
                " updated_at = excluded.updated_at",
                (user_id, int(after.learning), int(after.recall), now),
            )
            return True

        return await self._db.write(write)
