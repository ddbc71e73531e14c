"""Users' memories as last read, reused while their revision says nothing changed.

Every turn's prompt lists the user's memories, which change rarely; reading and
building them costs about a tenth of the Python a turn runs. :class:`MemoryCache`
trusts ``memory_revisions`` (migration ``m008_memory_revisions``) as
:mod:`picobot.store.revision_cache` describes; notes marked sensitive are never read
into it (they never reach the prompt).
"""

from __future__ import annotations

import sqlite3

from picobot.store.conversation.memories import Memory, list_memories
from picobot.store.revision_cache import MAX_CACHED_USERS, Cached, RevisionCache

CachedMemories = Cached[Memory]
"""One user's memories as read at a revision (``items``; ``params`` is the limit)."""


def _prompt_memories(conn: sqlite3.Connection, user_id: str, limit: int | None) -> list[Memory]:
    return list_memories(conn, user_id, limit, sensitive=False)


class MemoryCache(RevisionCache[Memory]):
    """``list_memories`` (sensitive notes left out) for a reader thread, reusing
    unchanged users' lists."""

    def __init__(self, max_users: int = MAX_CACHED_USERS) -> None:
        super().__init__("memory_revisions", _prompt_memories, max_users)

    def memories(self, conn: sqlite3.Connection, user_id: str, limit: int | None) -> CachedMemories:
        """``user_id``'s memories, at most ``limit`` (see :meth:`RevisionCache.get`)."""
        return self.get(conn, user_id, limit)
