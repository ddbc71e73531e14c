"""Users' memories as last read, reused while their revision says nothing changed.

Every turn's prompt lists the user's memories, which change rarely; reading and
building them costs about a tenth of the Python a turn runs.
:class:`MemoryCache` keeps each user's list with the revision it was read at
(``memory_revisions``, migration ``m008_memory_revisions``). A read looks the revision
up (one primary-key row) in the caller's snapshot and reuses the list only when it is
the same; triggers give every change a new value, whichever process makes it, so a
list is never reused after its memories changed. A user without memories has no
revision and costs that one lookup.

The cache is shared by the reader threads (a lock guards it) and holds at most
``max_users`` lists, the oldest read dropped first. :meth:`prune` drops the lists
whose memories changed since, so what a purge (by any process) removed does not stay
in this process's memory either; the runtime runs it every few seconds.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any

from picobot.store.conversation.memories import Memory, list_memories

MAX_CACHED_USERS = 10_000
"""Users whose memories one cache holds (the oldest read is dropped first)."""

_REVISION = "SELECT rev FROM memory_revisions WHERE user_id = ?"


@dataclass(slots=True)
class CachedMemories:
    """One user's memories as read at revision ``rev`` (None: the user has none).

    ``rendered`` is the caller's to fill with what it derives from ``memories`` (the
    retriever's prompt lines); it goes when the list does, and the next read of
    changed memories starts a new object.
    """

    rev: int | None
    limit: int | None
    memories: tuple[Memory, ...]
    rendered: Any = None


class MemoryCache:
    """``list_memories`` for a reader thread, reusing unchanged users' lists."""

    def __init__(self, max_users: int = MAX_CACHED_USERS) -> None:
        self._max = max(0, max_users)
        self._lock = threading.Lock()
        # By user id; dict order is the order of reads (the oldest is dropped first).
        self._entries: dict[str, CachedMemories] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def memories(self, conn: sqlite3.Connection, user_id: str, limit: int | None) -> CachedMemories:
        """``user_id``'s memories as :func:`list_memories` reads them (in a reader thread).

        ``conn`` must be inside the read transaction that the caller's other queries
        use: the revision and the list then come from the same snapshot.
        """
        row = conn.execute(_REVISION, (user_id,)).fetchone()
        if row is None:  # no memories at all
            with self._lock:
                self._entries.pop(user_id, None)
            return CachedMemories(None, limit, ())
        rev = int(row[0])
        with self._lock:
            entry = self._entries.get(user_id)
        if entry is not None and entry.rev == rev and entry.limit == limit:
            return entry
        # Notes marked sensitive never reach the prompt.
        entry = CachedMemories(
            rev, limit, tuple(list_memories(conn, user_id, limit, sensitive=False))
        )
        if self._max:
            with self._lock:
                self._entries.pop(user_id, None)
                self._entries[user_id] = entry
                while len(self._entries) > self._max:
                    del self._entries[next(iter(self._entries))]
        return entry

    def prune(self, conn: sqlite3.Connection) -> int:
        """Drop the lists whose memories changed (or are gone); return how many."""
        with self._lock:
            held = {user: entry.rev for user, entry in self._entries.items()}
        if not held:
            return 0
        rows = conn.execute(
            "SELECT user_id, rev FROM memory_revisions"
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
