"""The recall index on PostgreSQL: indexing queued records, and ranking them by BM25.

SQLite keeps the index in FTS5 (:mod:`picobot.store.retrieval.search`); here it is two
plain tables (:data:`picobot.store.postgres.schema.SEARCH_TABLES`): ``search_index``,
one row per record under the same encoded rowid (its owner token, keyed terms, session,
position, time and term count), and ``search_terms``, each term's frequency in each
record. The terms are the ones SQLite indexes (:func:`~picobot.store.retrieval.terms.index_text`
under the user's term key), computed here in Python because the key never reaches the
server.

Indexing: the triggers queue every record to index in ``search_pending`` (a message's
id; a note's, fact's or digest's negative rowid, see
:mod:`picobot.store.retrieval.search_kinds`); :func:`index_pending` reads each queued
record's owner and opened text and writes its entry. Why notes, facts and digests are
queued too: computing their terms needs the user's key, which a trigger has not.

Ranking is FTS5's ``bm25(search_index, 0.0, 1.0)``: k1 = 1.2, b = 0.75, a phrase's
idf ``ln((N - n + 0.5) / (n + 0.5))`` (1e-6 when not positive), a record's length its
term count plus the owner column's one token. The one difference: ``N``, ``n`` and the
average length count the asking owner's records, where FTS5 counts every user's (terms
are per user, so a user's ranking depends on their own records alone).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from picobot.store.migrations.facts import FACT_ROWID_BASE
from picobot.store.migrations.layers import DIGEST_ROWID_BASE, REFLECTION_ROWID_BASE
from picobot.store.retrieval.terms import index_text, query_phrases, user_token

if TYPE_CHECKING:
    from picobot.store.postgres.driver import PgConnection

Entry = tuple[int, str | None, str | None, str | None, int | None, float | None]
"""A record to index: (rowid, owner's user id, text, session id, position, time)."""


def index_pending(conn: PgConnection, limit: int | None) -> int:
    """In the writer: index up to ``limit`` queued records (None: all), lowest rowid
    first (notes, facts and digests before messages); how many left the queue.

    A queued record that is gone, or no longer indexed (a tool message, a sensitive
    note, an inactive fact, an empty digest), leaves the queue without an entry.
    """
    ids = [
        int(row[0])
        for row in conn.execute(
            "SELECT id FROM search_pending ORDER BY id LIMIT ?", (limit,)
        ).fetchall()
    ]
    if not ids:
        return 0
    queued = set(ids)
    entries = [e for e in _entries(conn, ids) if e[0] in queued]
    _write(conn, entries)
    return int(
        conn.execute(
            "DELETE FROM search_pending WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(ids),),
        ).rowcount
    )


def _entries(conn: PgConnection, ids: Sequence[int]) -> Iterator[Entry]:
    """The indexed records among the rowids ``ids``, with their opened text."""
    messages = [i for i in ids if i > 0]
    notes = [-i for i in ids if -FACT_ROWID_BASE <= i < 0]
    facts = [-i - FACT_ROWID_BASE for i in ids if -REFLECTION_ROWID_BASE <= i < -FACT_ROWID_BASE]
    layers = [
        -i - (DIGEST_ROWID_BASE if i < -DIGEST_ROWID_BASE else REFLECTION_ROWID_BASE)
        for i in ids
        if i < -REFLECTION_ROWID_BASE
    ]
    if messages:
        for row in conn.execute(
            "SELECT m.id, s.user_id, picobot_open(m.content) AS content, m.session_id,"
            " m.seq_order, m.created_at FROM messages m JOIN sessions s ON s.id = m.session_id"
            " WHERE m.id IN (SELECT value FROM json_each(?)) AND m.role IN ('user', 'assistant')",
            (json.dumps(messages),),
        ).fetchall():
            yield int(row[0]), row[1], row[2], row[3], row[4], row[5]
    if notes:
        for row in conn.execute(
            "SELECT id, user_id, picobot_open(key) AS key, picobot_open(content) AS content,"
            " updated_at FROM user_memories"
            " WHERE id IN (SELECT value FROM json_each(?)) AND sensitive = 0",
            (json.dumps(notes),),
        ).fetchall():
            text = None if row[2] is None or row[3] is None else f"{row[2]}: {row[3]}"
            yield -int(row[0]), row[1], text, None, None, row[4]
    if facts:
        for row in conn.execute(
            "SELECT id, user_id, picobot_open(subject) AS subject, picobot_open(text) AS text,"
            " updated_at FROM facts WHERE id IN (SELECT value FROM json_each(?)) AND active <> 0",
            (json.dumps(facts),),
        ).fetchall():
            text = None if row[3] is None else ("" if row[2] is None else f"{row[2]}: ") + row[3]
            yield -(FACT_ROWID_BASE + int(row[0])), row[1], text, None, None, row[4]
    if layers:
        for row in conn.execute(
            "SELECT id, level, user_id, picobot_open(text) AS text, updated_at FROM digests"
            " WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(sorted(set(layers))),),
        ).fetchall():
            if row[3]:
                base = REFLECTION_ROWID_BASE if int(row[1]) == 0 else DIGEST_ROWID_BASE
                yield -(base + int(row[0])), row[2], row[3], None, None, row[4]


def _write(conn: PgConnection, entries: Sequence[Entry]) -> None:
    """Replace the index entries of ``entries``: their rows and term frequencies."""
    if not entries:
        return
    sealer = conn.sealer
    columns: list[list[Any]] = [[] for _ in range(7)]
    terms: list[list[Any]] = [[], [], [], []]
    for rowid, user_id, text, session_id, seq_order, created_at in entries:
        body = index_text(user_id, text, sealer.terms_key(user_id)) or ""
        found = body.split()
        owner = user_token(user_id or "")
        entry: tuple[Any, ...] = (rowid, owner, body, session_id, seq_order, created_at, len(found))
        for column, value in zip(columns, entry, strict=True):
            column.append(value)
        for term, tf in Counter(found).items():
            for column, value in zip(terms, (owner, term, rowid, tf), strict=True):
                column.append(value)
    conn.execute(
        "DELETE FROM search_index WHERE rowid IN (SELECT value FROM json_each(?))",
        (json.dumps(columns[0]),),
    )
    conn.execute(
        "INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at, length)"
        " SELECT * FROM unnest(?::bigint[], ?::text[], ?::text[], ?::text[], ?::bigint[],"
        " ?::double precision[], ?::integer[])",
        columns,
    )
    if terms[0]:
        conn.execute(
            "INSERT INTO search_terms (owner, term, doc, tf)"
            " SELECT * FROM unnest(?::text[], ?::text[], ?::bigint[], ?::integer[])",
            terms,
        )


def ranked_sql(filters: Sequence[str]) -> str:
    """The ranking statement: ``rowid AS id`` and ``bm25 AS score`` (negative, best
    first) of the owner's best matches.

    Parameters: the owner token, the phrases (each its terms joined by spaces), those
    of ``filters`` (conditions on ``search_index``'s ``rowid``, ``session_id``,
    ``seq_order`` and ``created_at``), the limit. A one-term phrase's frequency is
    read from ``search_terms``; a longer phrase's is counted in the ``body`` of the
    records holding its first term (consecutive terms, overlapping ones too, as FTS5
    counts phrase instances).
    """
    where = "".join(f" AND {f}" for f in filters)
    return (
        "WITH phrases AS (SELECT p.i, p.phrase, string_to_array(p.phrase, ' ') AS words"  # noqa: S608
        " FROM unnest(?2::text[]) WITH ORDINALITY AS p(phrase, i)),"
        " counts AS (SELECT ph.i, t.doc, CASE WHEN cardinality(ph.words) = 1 THEN t.tf"
        " ELSE (SELECT regexp_count(' ' || d.body || ' ', ' (?=' || ph.phrase || ' )')"
        " FROM search_index d WHERE d.rowid = t.doc) END AS tf"
        " FROM phrases ph JOIN search_terms t ON t.owner = ?1 AND t.term = ph.words[1]),"
        " hits AS (SELECT i, doc, tf::double precision AS tf FROM counts WHERE tf > 0),"
        " stats AS (SELECT count(*)::double precision AS docs,"
        " sum(length + 1)::double precision / count(*) AS avgdl"
        " FROM search_index WHERE owner = ?1),"
        " idf AS (SELECT h.i, ln((s.docs - count(*) + 0.5) / (count(*) + 0.5)) AS w"
        " FROM hits h CROSS JOIN stats s GROUP BY h.i, s.docs),"
        " scores AS (SELECT h.doc, -sum(CASE WHEN idf.w > 0 THEN idf.w ELSE 1e-6 END"
        " * h.tf * 2.2 / (h.tf + 1.2 * (0.25 + 0.75 * (x.length + 1) / s.avgdl))) AS bm25"
        " FROM hits h JOIN idf ON idf.i = h.i JOIN search_index x ON x.rowid = h.doc"
        " CROSS JOIN stats s GROUP BY h.doc)"
        " SELECT rowid AS id, bm25 AS score FROM scores JOIN search_index ON rowid = scores.doc"
        f" WHERE owner = ?1{where} ORDER BY bm25, rowid LIMIT ?"
    )


def search_rows(
    conn: PgConnection,
    user_id: str,
    terms: Sequence[str],
    filters: Sequence[str],
    params: Sequence[Any],
    limit: int,
) -> list[tuple[int, str, str | None, int | None, float, float, str | None]]:
    """The best ``limit`` of ``user_id``'s records matching any of ``terms`` and every
    condition of ``filters`` (with ``params``), best first, as SQLite's statement
    returns them: (rowid, text, session id, position, time, bm25, role).

    Raises ValueError when no term has a word (as
    :func:`~picobot.store.retrieval.terms.body_query` does).
    """
    phrases = [" ".join(p) for p in query_phrases(user_id, terms, conn.sealer.terms_key(user_id))]
    if not phrases:
        raise ValueError("a recall query needs at least one term with a word in it")
    ranked = ranked_sql(filters)
    fact, layer, digest = FACT_ROWID_BASE, REFLECTION_ROWID_BASE, DIGEST_ROWID_BASE
    sql = (
        "SELECT h.id, h.score, picobot_open(m.content) AS message,"  # noqa: S608 - constants
        " picobot_open(u.key) AS note_key, picobot_open(u.content) AS note,"
        " picobot_open(f.subject) AS fact_subject, picobot_open(f.text) AS fact,"
        " picobot_open(d.text) AS layer, COALESCE(m.session_id, d.session_id),"
        " m.seq_order, COALESCE(m.created_at, u.updated_at, f.updated_at, d.updated_at),"
        " m.role, d.level"
        f" FROM ({ranked}) AS h"
        " LEFT JOIN messages m ON h.id > 0 AND m.id = h.id"
        f" LEFT JOIN user_memories u ON h.id < 0 AND h.id >= -{fact} AND u.id = -h.id"
        f" LEFT JOIN facts f ON h.id < -{fact} AND h.id >= -{layer} AND f.id = -h.id - {fact}"
        f" LEFT JOIN digests d ON h.id < -{layer} AND d.id = -h.id -"
        f" (CASE WHEN h.id < -{digest} THEN {digest} ELSE {layer} END)"
        " ORDER BY h.score, h.id"
    )
    rows = conn.execute(sql, [user_token(user_id), phrases, *params, limit]).fetchall()
    return [
        (
            int(row[0]),
            str(_text(row[2], row[3], row[4], row[5], row[6], row[7])),
            row[8],
            row[9],
            float(row[10]),
            float(row[1]),
            row[11] or (None if row[12] is None else "reflection" if row[12] == 0 else "digest"),
        )
        for row in rows
    ]


def _text(
    message: str | None,
    note_key: str | None,
    note: str | None,
    subject: str | None,
    fact: str | None,
    layer: str | None,
) -> str | None:
    """A hit's text as SQLite's statement makes it: the message; a note's name and
    text; a fact's subject and text; a digest's text."""
    if message is not None:
        return message
    if note_key is not None and note is not None:
        return f"{note_key}: {note}"
    if fact is not None:
        return ("" if subject is None else f"{subject}: ") + fact
    return layer
