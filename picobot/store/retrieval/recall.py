"""Ranked recall: the records of a user's past conversations that bear on a message.

One function of a connection (:func:`recall_records`), run in a reader thread inside
the turn's read snapshot, so the prompt builder, the ``memory_search`` tool and
``/search`` rank alike:

1. **Candidates**: the best ``candidates`` keyword matches among the user's messages
   (FTS5 bm25, :func:`picobot.store.retrieval.search.search_records`), minus what the prompt
   holds already (``exclude_ids``: the history window and the current message).
2. **Context**: each of the best ``context_hits`` matches brings the nearest
   ``neighbours`` messages *with content* before and after it in its session, scored
   ``neighbour_decay ** distance`` times the match's score. A match is often the
   question whose answer follows it, or the answer to a question just before it;
   messages without a word worth searching for ("ok", "thanks!") are passed over, as
   they answer nothing.
3. **Order**: best score first. Identical texts are kept once (a fork repeats its
   parent's transcript).

With a query vector (:class:`VectorQuery`, when an embedding model is configured), the
ranking of steps 1-3 is fused with the user's messages nearest in meaning
(:func:`picobot.store.retrieval.vectors.nearest_messages`) by reciprocal rank: each record
scores ``weight / (rrf_k + rank)`` in each list it is in (the keyword list weighs 1),
so a record found both ways comes first, and one phrased differently from the
question still comes.
:func:`fuse_vectors` does that on matches read earlier, so a turn embeds its message
while its keyword read runs and fuses in a second, short read; :func:`recall_records`
does both in one read. Both rank alike.

The caller packs the records into its budget in that order and renders them grouped
by session (see :mod:`picobot.kernel.prompt.recall_block`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from picobot.store.learned.digests import LAYER_KINDS
from picobot.store.retrieval.search import SearchHit, SearchQuery, search_records
from picobot.store.retrieval.terms import has_content
from picobot.store.retrieval.vectors import nearest_messages

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

_SIDE = (
    "SELECT id, role, picobot_open(content) AS content, seq_order, created_at FROM messages"
    " WHERE session_id = ? AND seq_order BETWEEN ? AND ? ORDER BY seq_order "
)
_BEFORE = _SIDE + "DESC"
_AFTER = _SIDE + "ASC"
SCAN_FACTOR = 3
"""Messages read on each side per neighbour wanted: room for contentless ones between."""


@dataclass(frozen=True, slots=True)
class RecallQuery:
    """One recall: ``user_id``'s messages matching any of ``terms``, with their context."""

    user_id: str
    terms: Sequence[str]
    exclude_ids: Sequence[int] = ()
    candidates: int = 150
    """Keyword matches ranked (the most any one recall considers)."""
    context_hits: int = 30
    """How many of the best matches bring their neighbours."""
    neighbours: int = 2
    """Messages with content taken on each side of such a match."""
    neighbour_decay: float = 0.5
    """A neighbour at distance d scores ``neighbour_decay ** d`` of its match."""
    include_memories: bool = False
    """Saved memories compete too (a listing); the prompt has them in a block of their own."""
    include_digests: bool = False
    """Session reflections and digests compete too (the prompt's recall, while on)."""
    max_digests: int = 2
    """At most this many of those are returned (the best); see ``recall_max_digests``."""
    exclude_layers: frozenset[int] = frozenset()
    """Reflections and digests (their ids) left out, like ``exclude_ids`` for messages."""


@dataclass(frozen=True, slots=True)
class VectorQuery:
    """The meaning side of a recall: the message's vector and how to fuse with it."""

    model: str
    vector: npt.NDArray[np.float32]
    candidates: int = 50
    """Most similar messages taken into the fusion."""
    min_similarity: float = 0.25
    rrf_k: int = 60
    weight: float = 1.0
    """Weight of the meaning ranking in the fusion (the keyword ranking weighs 1)."""


def recall_records(
    conn: sqlite3.Connection,
    query: RecallQuery,
    vectors: VectorQuery | None = None,
    *,
    expand: bool = True,
) -> list[SearchHit]:
    """The ranked records of ``query``: matches and their neighbours, best first.

    With ``vectors``, fused with the nearest messages in meaning. ``expand=False``
    returns the keyword matches only, unfused (for :func:`fuse_vectors` to finish later).
    """
    hits = keyword_matches(conn, query)
    return fuse_vectors(conn, query, hits, vectors) if expand else hits


def keyword_matches(conn: sqlite3.Connection, query: RecallQuery) -> list[SearchHit]:
    """Step 1 alone: the keyword matches of ``query``, best first."""
    hits = search_records(
        conn,
        SearchQuery(
            query.user_id,
            query.terms,
            limit=query.candidates,
            include_memories=query.include_memories,
            exclude_ids=query.exclude_ids,
            include_digests=query.include_digests,
        ),
    )
    if query.include_digests:
        hidden = query.exclude_layers
        hits = [h for h in hits if h.kind not in LAYER_KINDS or h.row_id not in hidden]
        layers = [h for h in hits if h.kind in LAYER_KINDS]
        hits = [h for h in hits if h.kind not in LAYER_KINDS or h in layers[: query.max_digests]]
    return hits


def fuse_vectors(
    conn: sqlite3.Connection,
    query: RecallQuery,
    matches: list[SearchHit],
    vectors: VectorQuery | None,
) -> list[SearchHit]:
    """Steps 2 and 3 on keyword ``matches``, then the fusion with ``vectors``' nearest."""
    hits = _with_neighbours(conn, query, matches, matches[: query.context_hits])
    # Fused after the neighbours are in: they keep their places in the keyword ranking
    # (fused first, they scored on the flat reciprocal-rank scale, below every match:
    # 0.858 against 0.904 on the tuning conversations of the development split).
    return hits if vectors is None else _fused(conn, query, hits, vectors)


def _with_neighbours(
    conn: sqlite3.Connection, query: RecallQuery, hits: list[SearchHit], around: list[SearchHit]
) -> list[SearchHit]:
    """``hits`` and the neighbours of the messages among ``around``, best first."""
    if query.neighbours <= 0 or not around:
        return hits
    # Message ids only: another kind's row id may equal a message's.
    seen_ids = {h.row_id for h in hits if h.kind == "message"} | set(query.exclude_ids)
    seen_texts = {(h.text, h.created_at) for h in hits}
    found: list[SearchHit] = []
    for hit in around:
        if hit.kind != "message":
            continue
        for distance, near in _neighbours(conn, hit, query.neighbours):
            key = (near.text, near.created_at)
            if near.row_id in seen_ids or key in seen_texts:
                continue
            seen_ids.add(near.row_id)
            seen_texts.add(key)
            score = hit.score * query.neighbour_decay**distance
            found.append(
                SearchHit(
                    "message",
                    near.row_id,
                    near.session_id,
                    near.seq_order,
                    near.text,
                    near.created_at,
                    score,
                    near.role,
                )
            )
    # sorted() is stable: a match stays ahead of a neighbour with the same score.
    return sorted([*hits, *found], key=lambda h: -h.score)


def _fused(
    conn: sqlite3.Connection, query: RecallQuery, matches: list[SearchHit], vectors: VectorQuery
) -> list[SearchHit]:
    """Reciprocal rank fusion of the keyword matches and the nearest messages."""
    near = nearest_messages(
        conn,
        query.user_id,
        vectors.model,
        vectors.vector,
        limit=vectors.candidates,
        exclude_ids=query.exclude_ids,
        min_similarity=vectors.min_similarity,
    )

    # Keyed by kind too: another kind's row id may equal a message's.
    scores: dict[tuple[str, int], float] = {}
    records: dict[tuple[str, int], SearchHit] = {}
    for rank, hit in enumerate(matches, 1):
        k = (hit.kind, hit.row_id)
        records[k] = hit
        scores[k] = scores.get(k, 0.0) + 1.0 / (vectors.rrf_k + rank)
    missing = [mid for mid, _ in near if ("message", mid) not in records]
    seen_texts = {(h.text, h.created_at) for h in matches}
    for record in _messages(conn, missing):
        if (record.text, record.created_at) not in seen_texts:  # a fork's copy
            seen_texts.add((record.text, record.created_at))
            records[("message", record.row_id)] = record
    for rank, (mid, _) in enumerate(near, 1):
        k = ("message", mid)
        if k in records:
            scores[k] = scores.get(k, 0.0) + vectors.weight / (vectors.rrf_k + rank)
    fused = [replace(records[k], score=scores[k]) for k in records]
    # sorted() is stable: at equal scores the keyword order stays.
    return sorted(fused, key=lambda h: -h.score)


def _messages(conn: sqlite3.Connection, ids: Sequence[int]) -> list[SearchHit]:
    """Messages by id, as hits (score 0: the fusion scores them)."""
    if not ids:
        return []
    rows = conn.execute(
        "SELECT id, session_id, seq_order, picobot_open(content) AS content, created_at, role"
        " FROM messages"
        " WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(ids)),),
    ).fetchall()
    by_id = {
        int(r[0]): SearchHit(
            "message", int(r[0]), r[1], int(r[2]), str(r[3]), float(r[4]), 0.0, r[5]
        )
        for r in rows
    }
    return [by_id[i] for i in ids if i in by_id]


def _neighbours(
    conn: sqlite3.Connection, hit: SearchHit, count: int
) -> list[tuple[int, SearchHit]]:
    """Up to ``count`` messages with content on each side of ``hit``, with distances."""
    if hit.session_id is None or hit.seq_order is None:
        return []
    span = SCAN_FACTOR * count + 1
    seq = hit.seq_order
    near = _with_content(conn, _BEFORE, hit, (seq - span, seq - 1), count)
    after = _with_content(conn, _AFTER, hit, (seq + 1, seq + span), count)
    out = [(i + 1, r) for i, r in enumerate(near)][::-1]
    out += [(i + 1, r) for i, r in enumerate(after)]
    return out


def _with_content(
    conn: sqlite3.Connection, sql: str, hit: SearchHit, seqs: tuple[int, int], count: int
) -> list[SearchHit]:
    """The first ``count`` messages with content that ``sql`` yields, nearest first.

    Read row by row: SQLite opens a row's text only when the cursor reaches it, so the
    rows past the last one needed are neither opened nor tested.
    """
    found: list[SearchHit] = []
    cursor = conn.execute(sql, (hit.session_id, *seqs))
    try:
        for r in cursor:
            text = str(r[2])
            if not has_content(text):
                continue
            found.append(
                SearchHit(
                    "message", int(r[0]), hit.session_id, int(r[3]), text, float(r[4]), 0.0, r[1]
                )
            )
            if len(found) >= count:
                break
    finally:
        cursor.close()
    return found
