"""What the recall index's writes run in the writer thread: indexing and merging.

Plain functions of a ``sqlite3`` connection, run inside a group commit by
:class:`picobot.store.retrieval.search.SearchIndex` (see there and migrations ``m006`` and
``m009`` in :mod:`picobot.store.migrations.search`).
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, cast

from picobot.store.engine import is_postgres
from picobot.store.postgres import search as pg_search

if TYPE_CHECKING:
    from picobot.store.postgres.driver import PgConnection

INDEX_BATCH = 2500
"""Most queued messages one indexing write takes. Large enough that one run every
``INDEX_INTERVAL_SECS`` keeps up with a busy server in one write (one index segment);
small enough that a backlog (after a pause, a restart) goes in several writes of a
fraction of a second each, with other writes between them."""


def index_pending(conn: sqlite3.Connection, limit: int | None = INDEX_BATCH) -> int:
    """In the writer: index queued messages, oldest first, at most ``limit``; how many.

    Runs inside the caller's transaction (a group commit), so the FTS5 segment it adds
    holds every message of the batch. A queued id whose message is gone was removed by
    the delete trigger; the join skips any other leftover. On PostgreSQL the queue holds
    notes, facts and digests too, indexed first (see
    :func:`picobot.store.postgres.search.index_pending`).
    """
    if is_postgres(conn):
        return pg_search.index_pending(cast("PgConnection", conn), limit)
    row = conn.execute(
        "SELECT min(id), max(id) FROM (SELECT id FROM search_pending ORDER BY id LIMIT ?) AS batch",
        (-1 if limit is None else limit,),
    ).fetchone()
    if row is None or row[0] is None:
        return 0
    return index_range(conn, int(row[0]), int(row[1]))


def index_range(conn: sqlite3.Connection, first: int, last: int) -> int:
    """In the writer: index the queued messages with ids ``first`` to ``last``; how many."""
    # CROSS JOIN keeps the queue the outer loop: otherwise the planner may walk every
    # message below ``last``.
    conn.execute(
        "INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)"
        " SELECT m.id, 'u' || lower(hex(s.user_id)) || 'x',"
        " picobot_index_text(s.user_id, m.content), m.session_id, m.seq_order, m.created_at"
        " FROM search_pending p CROSS JOIN messages m ON m.id = p.id"
        " JOIN sessions s ON s.id = m.session_id WHERE p.id BETWEEN ? AND ?",
        (first, last),
    )
    deleted = conn.execute("DELETE FROM search_pending WHERE id BETWEEN ? AND ?", (first, last))
    return int(deleted.rowcount)


MERGE_STEP_PAGES = 64
"""Index pages one step of :meth:`SearchIndex.optimize` merges: a few milliseconds each."""


TIDY_STEP_PAGES = 32
"""Index pages one step of :meth:`SearchIndex.tidy` merges: about 2 ms each."""

TIDY_MAX_STEPS = 64
"""Most steps one :meth:`SearchIndex.tidy` takes (bounds it if others add segments)."""


def _merge(conn: sqlite3.Connection, pages: int) -> bool:
    # FTS5's own test of whether a 'merge' did any work: fewer than two changes, none.
    before = conn.total_changes
    conn.execute("INSERT INTO search_index (search_index, rank) VALUES ('merge', ?)", (pages,))
    return conn.total_changes - before >= 2


def merge_step(conn: sqlite3.Connection, pages: int) -> bool:
    """In the writer: one FTS5 'merge' step toward one segment; False once none is left.

    A negative page count makes FTS5 merge every segment, however few, as 'optimize'
    does, and drop deleted entries when the output is the oldest segment.
    """
    return _merge(conn, -pages)


def tidy_step(conn: sqlite3.Connection, pages: int = TIDY_STEP_PAGES) -> bool:
    """In the writer: one step of the merge work FTS5's automerge would have done.

    A positive page count merges only a level that holds ``usermerge`` (4) segments, or
    goes on with a merge already started: what automerge does inside each write that
    adds a segment, which migration ``m009_search_tidy_steps`` turned off. False once
    there is nothing to merge.
    """
    return _merge(conn, pages)


def optimize_at_once(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO search_index (search_index) VALUES ('optimize')")


def index_pages(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM search_index_data").fetchone()[0])


def has_queued(conn: sqlite3.Connection) -> bool:
    return bool(conn.execute("SELECT EXISTS (SELECT 1 FROM search_pending)").fetchone()[0])


def requeue_index(conn: sqlite3.Connection) -> int:
    """In the writer: empty the recall index and index everything again; how many records.

    Messages go to the queue (indexed in the background, or before any explicit
    search); notes, facts and digests are indexed at once by their update triggers
    (queued like messages on PostgreSQL).
    For a change of how terms are made (see picobot.store.keys.binding).
    """
    conn.execute("DELETE FROM search_index")
    count = conn.execute(
        "INSERT OR IGNORE INTO search_pending (id)"
        " SELECT id FROM messages WHERE role IN ('user', 'assistant')"
    ).rowcount
    count += conn.execute("UPDATE user_memories SET content = content").rowcount
    count += conn.execute("UPDATE facts SET text = text").rowcount
    count += conn.execute("UPDATE digests SET text = text WHERE text <> ''").rowcount
    return int(count)
