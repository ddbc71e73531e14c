"""Keyword recall over a user's own messages and memories (SQLite FTS5).

The index is the ``search_index`` FTS5 table (migrations in
:mod:`picobot.store.migrations.search`), a regular FTS5 table that keeps its own copy
of each text. Triggers keep it in sync inside the transaction of the source row, so a
committed delete leaves no hit and a memory is indexed as it is saved. A new or edited
*message* is only queued (``search_pending``) and indexed in batches by
:func:`picobot.store.retrieval.search_writes.index_pending`: the runtime runs it every
``INDEX_INTERVAL_SECS``, and :meth:`SearchIndex.read_fresh` runs it before an explicit
search. Why: every index write adds an FTS5 segment, and a query reads each of its
terms in every segment. The merge work that keeps the segment count down runs in small
steps of its own (:meth:`SearchIndex.tidy`), not inside those writes.

Layout (migration ``m005_user_terms``):

- ``rowid`` is ``messages.id`` for a message, ``-user_memories.id`` for a memory and
  ``-(2**40 + facts.id)`` for an active learned fact (``m012_learned_facts``): the
  kind and source row follow from the sign and size (reflections and digests lie below,
  see :mod:`picobot.store.retrieval.search_kinds`), and a trigger deletes an entry with
  one rowid lookup (no text needed, unlike an external-content table whose 'delete'
  command must be fed the exact old values or it silently keeps the old tokens).
- ``owner`` holds the user token (:func:`user_token`).
- ``body`` holds the text as *user terms* (:func:`picobot.store.retrieval.terms.index_text`):
  every word carries a six-digit prefix derived from the owner (``"pizza"`` of one
  user is indexed as ``"304172pizza"``), so each term's doclist holds one user's rows
  and a query's work follows the asking user's history, not the whole database. The
  original text is read from ``messages`` / ``user_memories`` for the hits.
- ``session_id``, ``seq_order``, ``created_at`` are UNINDEXED copies, for the session
  exclusion of :class:`SearchQuery`. For a memory, ``created_at`` is its ``updated_at``.

Scoping: every query is ``MATCH 'owner:"TOKEN" AND body:(prefixed terms)'``
(:func:`fts_query`) in one statement. The prefix is a hash, so two users may share
one; the ``owner`` token (injective) is what keeps users apart. The owner is matched
rather than compared (``owner = ?``), and the window is left out by rowid
(``exclude_ids``): both are answered from the index, where a comparison would read
each match's stored row.

The triggers compute ``body`` with the SQL function ``picobot_index_text`` that
:func:`picobot.store.connect.install_functions` installs on every PicoBot connection.
Deletes need no function (one rowid lookup), so a purge works from any SQLite client;
a client without the function that writes a memory gets the error "no such function",
never an unindexed row.

Erasing text for real (purge): deleting the source rows removes the entries from
``search_index_content`` in the same transaction, but FTS5 (before the
``secure-delete`` option of SQLite 3.44) records a delete as a new index segment that
repeats the deleted row's tokens, and the old segments still hold them. After a purge,
call :meth:`SearchIndex.optimize`: it merges all segments into one (FTS5 'merge' steps,
each its own write) and drops deleted entries. Freed pages still hold old bytes until
overwritten, so the purge must also run with ``PRAGMA secure_delete=ON`` (or VACUUM)
and checkpoint the WAL (:func:`picobot.store.erasure.erase.erase_residue` does all of it).

Rows written with ``INSERT OR REPLACE`` bypass the delete triggers (SQLite fires them on
REPLACE only with ``recursive_triggers`` on); the repositories use UPSERT and DELETE.

On PostgreSQL the same operations run on plain tables (:mod:`picobot.store.postgres.search`):
the triggers queue notes, facts and digests as well as messages (their terms need the
user's key), the indexer writes them, and :func:`search_records` ranks them by FTS5's
bm25 with the same filters (:func:`search_filters`). There are no segments to merge:
:meth:`SearchIndex.tidy` and :meth:`SearchIndex.optimize` do nothing.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

from picobot.errors import StoreUnavailable
from picobot.store.db import Database
from picobot.store.engine import is_postgres
from picobot.store.migrations.facts import FACT_ROWID_BASE
from picobot.store.migrations.layers import REFLECTION_ROWID_BASE
from picobot.store.postgres import search as pg_search
from picobot.store.retrieval.search_kinds import joins, kind_of, rowid_filter
from picobot.store.retrieval.search_writes import (
    INDEX_BATCH,
    MERGE_STEP_PAGES,
    TIDY_MAX_STEPS,
    has_queued,
    index_pages,
    index_pending,
    merge_step,
    optimize_at_once,
    tidy_step,
)
from picobot.store.retrieval.terms import MAX_QUERY_TERMS as MAX_QUERY_TERMS
from picobot.store.retrieval.terms import WORD
from picobot.store.retrieval.terms import body_query as body_query
from picobot.store.retrieval.terms import fts_query as fts_query
from picobot.store.retrieval.terms import user_token as user_token

if TYPE_CHECKING:
    from picobot.store.postgres.driver import PgConnection

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_LIMIT = 200
"""Most hits one search returns (recall takes up to 150 candidates)."""


@dataclass(slots=True)
class SearchHit:
    """One recalled record. ``score`` is the negated bm25: higher is a better match.

    Not frozen, though nothing changes a hit once made (a copy with another score is
    :func:`dataclasses.replace`'s): a recall at 1M messages makes hundreds of them per
    turn, and a frozen dataclass takes five times as long to build.
    """

    kind: str
    row_id: int
    session_id: str | None
    seq_order: int | None
    text: str
    created_at: float
    score: float
    role: str = ""
    """``user`` or ``assistant`` for a message; ``reflection`` or ``digest`` for those;
    empty for a memory or a fact."""


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """One recall search: ``user_id``'s records matching any of ``terms``.

    Two ways to leave out what the prompt holds already. ``exclude_ids``: these message
    ids (the retriever passes its history window and the current message). With
    ``session_id`` and ``before_seq``: messages of that session from ``before_seq`` on;
    other sessions' messages and memories stay in. The ids cost less: the index
    answers them from its rowids, where the session test reads every match's stored
    columns. ``include_memories=False`` searches messages only.
    """

    user_id: str
    terms: Sequence[str]
    limit: int = 10
    session_id: str | None = None
    before_seq: int | None = None
    include_memories: bool = True
    exclude_ids: Sequence[int] = ()
    include_facts: bool = False
    """Learned facts (active ones) compete too, as hits of kind ``fact``."""
    include_digests: bool = False
    """Session reflections and digests compete too (kinds ``reflection``, ``digest``)."""
    include_messages: bool = True
    """Messages compete (False: only the other kinds asked for)."""
    in_session: str | None = None
    """Only this session's records: its messages and its reflections (a filter, not the
    window exclusion of ``session_id``); notes, facts and digests belong to no session."""
    since: float | None = None
    """Only records written (a note, fact or digest: last changed) at or after this time."""


EXCLUDED_AS_PARAMETERS = 64
"""Up to this many ``exclude_ids`` go into the statement as parameters, more as JSON."""


def search_filters(query: SearchQuery) -> tuple[list[str], list[Any]]:
    """The conditions on ``search_index`` (its ``rowid``, ``session_id``, ``seq_order``
    and ``created_at``) of every field of ``query`` but its owner and terms, and their
    parameters: the same on both engines."""
    filters: list[str] = []
    params: list[Any] = []
    kinds = rowid_filter(
        memories=query.include_memories,
        facts=query.include_facts,
        layers=query.include_digests,
        messages=query.include_messages,
    )
    if kinds:
        filters.append(kinds)
    ids = [int(i) for i in query.exclude_ids]
    if len(ids) > EXCLUDED_AS_PARAMETERS:
        # Any number of ids in one parameter (SQLite caps the parameters of a statement).
        filters.append("rowid NOT IN (SELECT value FROM json_each(?))")
        params.append(json.dumps(ids))
    elif ids:  # cheaper than json_each for a window's worth of ids
        filters.append(f"rowid NOT IN ({', '.join('?' * len(ids))})")
        params += ids
    if query.session_id is not None and query.before_seq is not None:
        # IS NOT: memories have a NULL session_id and must stay in.
        filters.append("(session_id IS NOT ? OR seq_order < ?)")
        params += [query.session_id, query.before_seq]
    if query.in_session is not None:
        # A reflection's session is its digest row's; the index holds a message's own.
        filters.append(
            "(session_id = ? OR rowid IN (SELECT -(? + id) FROM digests"
            " WHERE session_id = ? AND level = 0))"
        )
        params += [query.in_session, REFLECTION_ROWID_BASE, query.in_session]
    if query.since is not None:
        filters.append("created_at >= ?")
        params.append(query.since)
    return filters, params


def search_sql(query: SearchQuery) -> tuple[str, list[Any]]:
    """The statement and parameters :meth:`SearchIndex.search` runs on SQLite (for
    EXPLAIN too).

    The MATCH (the owner's token and the prefixed terms) and the rowid tests are
    answered from the index alone; the best ``query.limit`` are joined to their source
    rows for the text, session, position and time. Only the session exclusion
    (``session_id`` and ``before_seq``) reads stored columns of every match.
    """
    # The expression is made in SQL (picobot.store.connect): a user's terms are keyed.
    filters, rest = search_filters(query)
    where = " AND ".join(["search_index MATCH picobot_match(?, ?)", *filters])
    params: list[Any] = [query.user_id, json.dumps(list(query.terms)), *rest]
    params.append(query.limit)
    # The index ranks and limits; only the hits are joined to their source rows. An
    # explicit bm25() costs less than the configured 'rank' (FTS5 re-parses that per
    # query). The inner SELECT names no stored column: the sorter would read each one
    # for every match (a row lookup each), not just for the hits.
    # Facts and layers are joined only when asked for (their tables come with m012, m015).
    text, when, session, role, join = joins(facts=query.include_facts, layers=query.include_digests)
    sql = (
        "SELECT h.id, COALESCE(picobot_open(m.content),"  # noqa: S608 - constant pieces
        f" picobot_open(u.key) || ': ' || picobot_open(u.content){text}),"
        f" {session}, m.seq_order, COALESCE(m.created_at, u.updated_at{when}), h.score, {role}"
        " FROM (SELECT rowid AS id, bm25(search_index, 0.0, 1.0) AS score FROM search_index"
        f" WHERE {where} ORDER BY score LIMIT ?) AS h"
        " LEFT JOIN messages m ON h.id > 0 AND m.id = h.id"
        f" LEFT JOIN user_memories u ON h.id < 0 AND h.id >= -{FACT_ROWID_BASE} AND u.id = -h.id"
        f"{join} ORDER BY h.score"
    )
    return sql, params


def search_records(conn: sqlite3.Connection, query: SearchQuery) -> list[SearchHit]:
    """:meth:`SearchIndex.search` on a plain connection (in a reader thread)."""
    terms = [t for t in query.terms if WORD.search(t)]
    limit = min(query.limit, MAX_LIMIT)
    kinds = (query.include_messages, query.include_memories, query.include_facts)
    if not terms or limit <= 0 or not any((*kinds, query.include_digests)):
        return []
    # Twice the limit leaves room for the fork copies dropped below.
    rows: Sequence[Sequence[Any]]
    if is_postgres(conn):
        filters, params = search_filters(query)
        rows = pg_search.search_rows(
            cast("PgConnection", conn), query.user_id, terms, filters, params, limit * 2
        )
    else:
        sql, params = search_sql(replace(query, terms=terms, limit=limit * 2))
        rows = conn.execute(sql, params).fetchall()
    hits: list[SearchHit] = []
    seen: set[tuple[str, float]] = set()
    for row in rows:
        rowid, text, created_at = int(row[0]), str(row[1]), float(row[4])
        kind, row_id = kind_of(rowid)
        if (text, created_at) in seen:
            continue
        seen.add((text, created_at))
        hits.append(
            SearchHit(
                kind=kind,
                row_id=row_id,
                session_id=row[2],
                seq_order=None if row[3] is None else int(row[3]),
                text=text,
                created_at=created_at,
                score=-float(row[5]),
                role=row[6] or "",
            )
        )
        if len(hits) == limit:
            break
    return hits


class SearchIndex:
    """Ranked keyword search over one user's records; see the module docstring."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def search(
        self,
        user_id: str,
        terms: Sequence[str],
        *,
        limit: int = 10,
        session_id: str | None = None,
        before_seq: int | None = None,
        include_memories: bool = True,
    ) -> list[SearchHit]:
        """Best matches of ``user_id``'s own records for any of ``terms``, best first.

        See :class:`SearchQuery` for the window exclusion. Identical copies (a forked
        session repeats its parent's transcript) are returned once.
        """
        query = SearchQuery(user_id, terms, limit, session_id, before_seq, include_memories)
        return await self.read_fresh(lambda conn: search_records(conn, query))

    async def filtered(self, query: SearchQuery) -> list[SearchHit]:
        """:meth:`search` with every field of ``query`` (kinds, session, since)."""
        return await self.read_fresh(lambda conn: search_records(conn, query))

    async def read_fresh(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` in a read, after indexing every queued record.

        An explicit search (``/search``, the ``memory_search`` tool, the admin API)
        sees every stored message, queued ones too (on PostgreSQL notes, facts and
        digests are queued as well, and so found right after they are written). A
        read-only or locked database answers from what is indexed rather than not at all.
        """
        try:
            await self.index_pending(None)
        except StoreUnavailable as exc:
            log.warning("search without indexing the newest messages: %s", exc)
        return await self._db.read(fn)

    async def index_pending(self, limit: int | None = INDEX_BATCH) -> int:
        """Index up to ``limit`` queued messages (None: all) in one group commit; how many.

        The runtime runs it every ``INDEX_INTERVAL_SECS`` through
        :meth:`index_in_background` (see ``search_writes.index_pending``). An empty
        queue is seen on a reader: an idle server never takes the write lock for it
        (another process holding that lock, a CLI purge say, is left alone).
        """
        if not await self._db.read(has_queued):
            return 0
        return int(await self._db.write(lambda conn: index_pending(conn, limit)))

    async def queue_depth(self) -> int:
        """Stored messages not yet in the index (``/metrics``: is indexing keeping up?)."""
        row = await self._db.fetchone("SELECT COUNT(*) AS n FROM search_pending")
        return int(row["n"]) if row else 0

    async def index_in_background(self, batch: int = INDEX_BATCH) -> int:
        """The runtime's periodic indexing: the whole queue, ``batch`` messages a write.

        Then, if it indexed anything, the index's merge work (:meth:`tidy`). Skipped
        while :meth:`optimize` runs: every segment added meanwhile makes FTS5 start its
        merge over, so the queue waits (recall misses those messages for the seconds
        the merge takes). Returns how many messages it indexed.
        """
        done = 0
        while not self._db.search_compaction.locked():
            indexed = await self.index_pending(batch)
            done += indexed
            if indexed < batch:
                break
        if done:
            await self.tidy()
        return done

    async def tidy(self, *, max_steps: int = TIDY_MAX_STEPS) -> int:
        """Do the index's pending merge work in small steps, each its own write.

        FTS5's automerge would do it inside the write that adds a segment, holding the
        writer (and every turn's write behind it) for tens of milliseconds under load;
        steps of ``TIDY_STEP_PAGES`` let other writes in between. Stops when a step finds
        nothing to merge, after ``max_steps``, or when :meth:`optimize` starts. Returns
        the number of writes it took (none on PostgreSQL: no segments to merge).
        """
        if self._db.engine.name == "postgresql":
            return 0
        steps = 0
        while steps < max_steps and not self._db.search_compaction.locked():
            steps += 1
            if not await self._db.write(tidy_step):
                break
        return steps

    async def optimize(self, *, step_pages: int = MERGE_STEP_PAGES) -> int:
        """Merge all index segments into one, dropping deleted entries (after purges).

        Runs as small 'merge' steps of ``step_pages`` pages, each its own group-commit
        write, so other writes go on between them (one 'optimize' holds the writer for
        seconds on a large index). A segment added meanwhile (a memory, a
        delete, another process's indexer) restarts FTS5's merge; if the steps have not
        converged after twice the expected number, one 'optimize' finishes the job.
        Returns the number of writes it took: none on PostgreSQL, whose index tables
        keep no deleted entries (its own VACUUM reclaims their space).
        """
        if self._db.engine.name == "postgresql":
            return 0
        async with self._db.search_compaction:
            pages = await self._db.read(index_pages)
            most = 2 * (pages // step_pages + 1) + 8
            for step in range(1, most + 1):
                if not await self._db.write(lambda conn: merge_step(conn, step_pages)):
                    return step
            log.warning("search index: %d merge steps did not converge; optimizing at once", most)
            await self._db.write(optimize_at_once)
            return most + 1
