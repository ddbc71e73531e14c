"""Users' prompt facts as last read, reused while their revision says nothing changed.

With learning on, every turn's prompt shows the user's most confident facts: reading
and opening 50 of them (sealed subject and text) cost about 0.4 ms a turn, most of
what learning adds to one. :class:`FactCache` trusts ``fact_revisions`` (migration
``m029_fact_revisions``) as :mod:`picobot.store.revision_cache` describes.
"""

from __future__ import annotations

import sqlite3

from picobot.store.learned.facts import Fact, active_facts
from picobot.store.revision_cache import MAX_CACHED_USERS, Cached, RevisionCache


class FactCache(RevisionCache[Fact]):
    """:func:`active_facts` for a reader thread, reusing unchanged users' lists."""

    def __init__(self, max_users: int = MAX_CACHED_USERS) -> None:
        super().__init__("fact_revisions", active_facts, max_users)

    def facts(
        self, conn: sqlite3.Connection, user_id: str, min_confidence: float, limit: int
    ) -> Cached[Fact]:
        """``user_id``'s active facts of at least ``min_confidence``, most confident
        first, at most ``limit`` (see :meth:`RevisionCache.get`)."""
        return self.get(conn, user_id, min_confidence, limit)
