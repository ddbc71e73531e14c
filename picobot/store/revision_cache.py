"""Users' rows as last read, reused while their revision says nothing changed.

A revisions table (``memory_revisions``, m008; ``fact_revisions``, m029) holds one row
per user whose rows of the watched table exist. Triggers give it a fresh value from
``revision_clock`` (a counter that only grows) on every insert, update or delete of
the user's rows, in the transaction of the change, whichever process makes it, and
delete it with the user's last row. :class:`RevisionCache` keeps each user's rows with
the revision they were read at: a read looks the revision up (one primary-key row) in
the caller's snapshot and reuses the rows only when it is the same, so rows are never
reused after they changed. A user without rows costs that one lookup.

The cache is shared by the reader threads (a lock guards it) and holds at most
``max_users`` entries, the oldest read dropped first. :meth:`RevisionCache.prune`
drops the entries whose rows changed since, so what a purge (by any process) removed
does not stay in this process's memory either; the runtime runs it every few seconds.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

MAX_CACHED_USERS = 10_000
"""Users whose rows one cache holds (the oldest read is dropped first)."""


@dataclass(slots=True)
class Cached(Generic[T]):
    """One user's rows as read at revision ``rev`` (None: the user has none), with the
    read's ``params``.

    ``rendered`` is the caller's to fill with what it derives from ``items`` (the
    retriever's prompt lines); it goes when the entry does, and the next read of
    changed rows starts a new object.
    """

    rev: int | None
    params: Hashable
    items: tuple[T, ...]
    rendered: Any = None


class RevisionCache(Generic[T]):
    """``load(conn, user_id, *params)`` for a reader thread, reusing unchanged users' rows."""

    def __init__(
        self,
        revisions: str,
        load: Callable[..., Iterable[T]],
        max_users: int = MAX_CACHED_USERS,
    ) -> None:
        """``revisions`` is the table of the revisions (a constant, never user input)."""
        self._revisions = revisions
        self._load = load
        self._max = max(0, max_users)
        self._lock = threading.Lock()
        # By user id; dict order is the order of reads (the oldest is dropped first).
        self._entries: dict[str, Cached[T]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, conn: sqlite3.Connection, user_id: str, *params: Hashable) -> Cached[T]:
        """``user_id``'s rows as ``load`` reads them with ``params`` (in a reader thread).

        ``conn`` must be inside the read transaction that the caller's other queries
        use: the revision and the rows then come from the same snapshot.
        """
        row = conn.execute(
            f"SELECT rev FROM {self._revisions} WHERE user_id = ?",  # noqa: S608
            (user_id,),
        ).fetchone()
        if row is None:  # no rows at all
            with self._lock:
                self._entries.pop(user_id, None)
            return Cached(None, params, ())
        rev = int(row[0])
        with self._lock:
            entry = self._entries.get(user_id)
        if entry is not None and entry.rev == rev and entry.params == params:
            return entry
        entry = Cached(rev, params, tuple(self._load(conn, user_id, *params)))
        if self._max:
            with self._lock:
                self._entries.pop(user_id, None)
                self._entries[user_id] = entry
                while len(self._entries) > self._max:
                    del self._entries[next(iter(self._entries))]
        return entry

    def prune(self, conn: sqlite3.Connection) -> int:
        """Drop the entries whose rows changed (or are gone); return how many."""
        with self._lock:
            held = {user: entry.rev for user, entry in self._entries.items()}
        if not held:
            return 0
        rows = conn.execute(
            f"SELECT user_id, rev FROM {self._revisions}"  # noqa: S608
            " WHERE user_id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(held)),),
        ).fetchall()
        current = {str(r[0]): int(r[1]) for r in rows}
        stale = [user for user, rev in held.items() if current.get(user) != rev]
        with self._lock:
            for user in stale:
                entry = self._entries.get(user)
                # A newer read may have replaced it meanwhile: keep that one.
                if entry is not None and entry.rev == held[user]:
                    del self._entries[user]
        return len(stale)
