"""Learned facts: the rows, their reads and the filters the CLI and chat use.

Reads take a plain ``sqlite3`` connection so they run inside one read snapshot
(:meth:`Database.read`), e.g. the turn's prompt read. Writes that follow the lifecycle
rules live in :mod:`picobot.store.learned.fact_writes`; purges in
:mod:`picobot.store.learned.fact_purge`.
Every per-user read takes the owner's id explicitly and touches only that owner's rows.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from picobot.errors import UserError
from picobot.store.db import Row
from picobot.store.keys.sealing import tag_matches
from picobot.store.learned.fact_rules import normalize_subject, validate_category

_COLUMNS = (
    "id, user_id, picobot_open(subject) AS subject, category, picobot_open(text) AS text,"
    " confidence, active, pinned, created_at, updated_at"
)


@dataclass(frozen=True, slots=True)
class Fact:
    """One learned fact."""

    id: int
    user_id: str
    subject: str | None
    category: str
    text: str
    confidence: float
    active: bool
    pinned: bool
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class FactChange:
    """One row of a fact's history: what changed, from what, why, and who did it."""

    at: float
    reason: str
    old_text: str | None
    new_text: str | None
    old_confidence: float | None
    new_confidence: float | None
    old_active: bool | None
    new_active: bool | None
    session_id: str | None
    actor: str | None


@dataclass(frozen=True, slots=True)
class FactSource:
    """Where a fact was learned or reinforced (no session: made by an operator)."""

    session_id: str | None
    message_id: int | None
    created_at: float


@dataclass(frozen=True, slots=True)
class FactFilter:
    """Which facts an operator means; every field that is set must match.

    ``text`` matches a substring of the text or subject, case-insensitively.
    """

    user_id: str | None = None
    subject: str | None = None
    category: str | None = None
    active: bool | None = None
    min_confidence: float | None = None
    max_confidence: float | None = None
    text: str | None = None
    ids: tuple[int, ...] = ()
    pinned: bool | None = None

    @property
    def names_nothing(self) -> bool:
        """Whether no criterion is set (the filter would match every fact)."""
        return self == FactFilter()

    def where(self) -> tuple[str, list[Any]]:
        """The part the database judges: a WHERE expression and its parameters (``1 = 1``
        when nothing of it is set). :meth:`admits` judges the rest on the opened rows.

        A subject is matched by its lookup tag, which needs its owner's key: in SQL when
        ``user_id`` is set (one owner), else by :meth:`admits`.
        """
        parts: list[str] = []
        params: list[Any] = []
        if self.user_id is not None:
            parts.append("user_id = ?")
            params.append(self.user_id)
            if self.subject is not None:
                parts.append(tag_matches("subject_tag", "subject", "?", "?"))
                subject = self.subject.strip().lower() or None
                params += [self.user_id, subject, subject]
        if self.category is not None:
            parts.append("category = ?")
            params.append(self.category)
        if self.active is not None:
            parts.append("active = ?")
            params.append(int(self.active))
        if self.min_confidence is not None:
            parts.append("confidence >= ?")
            params.append(self.min_confidence)
        if self.max_confidence is not None:
            parts.append("confidence <= ?")
            params.append(self.max_confidence)
        if self.pinned is not None:
            parts.append("pinned = ?")
            params.append(int(self.pinned))
        if self.ids:
            parts.append(f"id IN ({', '.join('?' * len(self.ids))})")
            params += list(self.ids)
        return " AND ".join(parts) or "1 = 1", params

    @property
    def opens(self) -> bool:
        """Whether :meth:`admits` has anything to judge (the rows must be read first)."""
        return bool(self.text) or (self.subject is not None and self.user_id is None)

    def admits(self, fact: Fact) -> bool:
        """The criteria on sealed text, judged on the opened fact: ``text`` a substring of
        its text or subject (case-insensitive), ``subject`` across every user."""
        if self.subject is not None and self.user_id is None:
            wanted = self.subject.strip().lower() or None
            if (fact.subject or None) != wanted:
                return False
        if self.text:
            needle = self.text.lower()
            if needle not in fact.text.lower() and needle not in (fact.subject or "").lower():
                return False
        return True


def operator_filter(
    *,
    user_id: str | None = None,
    subject: str | None = None,
    category: str | None = None,
    active: bool | None = None,
    min_confidence: float | None = None,
    max_confidence: float | None = None,
    text: str | None = None,
    ids: tuple[int, ...] = (),
    pinned: bool | None = None,
) -> FactFilter:
    """An operator's criteria as a :class:`FactFilter`, checked alike for the CLI and API.

    Raises UserError (shown verbatim) for an unknown category, a confidence outside
    0..1 or a range that is empty by construction, rather than matching nothing, so a
    typo never reads as "there are no such facts". ``subject`` is compared as stored
    (trimmed, lowercase); ``""`` selects the facts about nothing in particular.
    """
    if category is not None:
        try:
            category = validate_category(category)
        except ValueError as exc:
            raise UserError(str(exc)) from None
    for name, value in (("min_confidence", min_confidence), ("max_confidence", max_confidence)):
        if value is not None and not 0.0 <= value <= 1.0:
            raise UserError(f"{name} must be between 0 and 1")
    if (
        min_confidence is not None
        and max_confidence is not None
        and min_confidence > max_confidence
    ):
        raise UserError("min_confidence is above max_confidence")
    if any(i < 1 for i in ids):
        raise UserError("fact ids are positive numbers")
    return FactFilter(
        user_id=user_id,
        subject=None if subject is None else normalize_subject(subject) or "",
        category=category,
        active=active,
        min_confidence=min_confidence,
        max_confidence=max_confidence,
        text=text or None,
        ids=tuple(dict.fromkeys(ids)),
        pinned=pinned,
    )


def fact_from_row(row: Row) -> Fact:
    """A :class:`Fact` from a row selected with this module's columns."""
    return Fact(
        id=int(row["id"]),
        user_id=str(row["user_id"]),
        subject=row["subject"],
        category=str(row["category"]),
        text=str(row["text"]),
        confidence=float(row["confidence"]),
        active=bool(row["active"]),
        pinned=bool(row["pinned"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
    )


def _rows(conn: sqlite3.Connection, sql: str, params: Any) -> list[Row]:
    # PicoBot's connections yield sqlite3.Row (picobot.store.connect).
    rows: list[Row] = conn.execute(sql, params).fetchall()
    return rows


def active_facts(
    conn: sqlite3.Connection, user_id: str, min_confidence: float, limit: int
) -> list[Fact]:
    """``user_id``'s active facts with at least ``min_confidence``, most confident first.

    Ties go to the most recently updated, then the newest id, so the order (and a
    prompt rendered from it) is the same for the same rows. Usable in any read
    transaction, e.g. a turn's one read snapshot.
    """
    rows = _rows(
        conn,
        f"SELECT {_COLUMNS} FROM facts WHERE user_id = ? AND active = 1"  # noqa: S608
        " AND confidence >= ? ORDER BY confidence DESC, updated_at DESC, id DESC LIMIT ?",
        (user_id, min_confidence - 1e-9, max(0, limit)),
    )
    return [fact_from_row(r) for r in rows]


def count_facts(conn: sqlite3.Connection, user_id: str) -> int:
    """How many facts ``user_id`` has, active or not."""
    row = conn.execute("SELECT COUNT(*) FROM facts WHERE user_id = ?", (user_id,)).fetchone()
    return int(row[0]) if row else 0


OPENED_BATCH = 500
"""Rows read at a time when a filter is judged on opened texts (:meth:`FactFilter.admits`)."""


def find_facts(conn: sqlite3.Connection, where: FactFilter, limit: int | None) -> list[Fact]:
    """Facts matching ``where``, grouped by user, most confident first."""
    sql, params = where.where()
    rows = _rows(
        conn,
        f"SELECT {_COLUMNS} FROM facts WHERE {sql}"  # noqa: S608
        " ORDER BY user_id, confidence DESC, updated_at DESC, id DESC LIMIT ?",
        (*params, -1 if limit is None or where.opens else max(0, limit)),
    )
    found = [f for f in map(fact_from_row, rows) if where.admits(f)]
    return found if limit is None else found[: max(0, limit)]


def fact_page(
    conn: sqlite3.Connection, where: FactFilter, limit: int, before_id: int | None = None
) -> tuple[list[Fact], int | None]:
    """Up to ``limit`` facts matching ``where``, newest (highest id) first, and the id to
    pass as ``before_id`` for the next page (None on the last).

    Keyset paging by id: a fact created or changed between pages neither repeats nor
    shifts the rest, unlike paging by confidence or by offset.
    """
    sql, params = where.where()
    want = max(0, limit) + 1
    batch = OPENED_BATCH if where.opens else want
    found: list[Fact] = []
    cursor = 2**62 if before_id is None else before_id
    while len(found) < want:
        rows = _rows(
            conn,
            f"SELECT {_COLUMNS} FROM facts WHERE ({sql}) AND id < ?"  # noqa: S608
            " ORDER BY id DESC LIMIT ?",
            (*params, cursor, batch),
        )
        found += [f for f in map(fact_from_row, rows) if where.admits(f)]
        if len(rows) < batch:
            break
        cursor = int(rows[-1]["id"])
    facts = found[: max(0, limit)]
    return facts, facts[-1].id if len(found) > limit and facts else None


def get_fact(conn: sqlite3.Connection, fact_id: int, user_id: str | None = None) -> Fact | None:
    """The fact ``fact_id``; with ``user_id``, only if it is that user's."""
    rows = _rows(
        conn,
        f"SELECT {_COLUMNS} FROM facts WHERE id = ?"  # noqa: S608
        " AND (CAST(?2 AS TEXT) IS NULL OR user_id = ?2)",
        (fact_id, user_id),
    )
    return fact_from_row(rows[0]) if rows else None


def fact_history(conn: sqlite3.Connection, fact_id: int) -> list[FactChange]:
    """Every recorded change of a fact, oldest first."""
    rows = _rows(
        conn,
        "SELECT at, reason, picobot_open(old_text) AS old_text, picobot_open(new_text) AS"
        " new_text, old_confidence, new_confidence, old_active, new_active, session_id, actor"
        " FROM fact_history WHERE fact_id = ? ORDER BY id",
        (fact_id,),
    )
    return [
        FactChange(
            at=float(r["at"]),
            reason=str(r["reason"]),
            old_text=r["old_text"],
            new_text=r["new_text"],
            old_confidence=r["old_confidence"],
            new_confidence=r["new_confidence"],
            old_active=None if r["old_active"] is None else bool(r["old_active"]),
            new_active=None if r["new_active"] is None else bool(r["new_active"]),
            session_id=r["session_id"],
            actor=r["actor"],
        )
        for r in rows
    ]


def fact_sources(conn: sqlite3.Connection, fact_id: int) -> list[FactSource]:
    """Where a fact was learned and reinforced, oldest first."""
    rows = _rows(
        conn,
        "SELECT session_id, message_id, created_at FROM fact_sources WHERE fact_id = ? ORDER BY id",
        (fact_id,),
    )
    return [FactSource(r["session_id"], r["message_id"], float(r["created_at"])) for r in rows]


def fact_detail(
    conn: sqlite3.Connection, fact_id: int
) -> tuple[Fact, list[FactSource], list[FactChange]] | None:
    """A fact with its sources and history, read together (None if there is no such fact)."""
    fact = get_fact(conn, fact_id)
    if fact is None:
        return None
    return fact, fact_sources(conn, fact_id), fact_history(conn, fact_id)


def idle_unlearned(conn: sqlite3.Connection, idle_before: float, limit: int) -> list[str]:
    """Sessions last active at or before ``idle_before`` with a user message extraction
    has not read yet, the longest idle first."""
    rows = conn.execute(
        "SELECT s.id FROM sessions s LEFT JOIN fact_progress p ON p.session_id = s.id"
        " WHERE s.last_active <= ? AND EXISTS (SELECT 1 FROM messages m"
        " WHERE m.session_id = s.id AND m.role = 'user'"
        " AND m.seq_order > COALESCE(p.covered_seq, 0))"
        " ORDER BY s.last_active LIMIT ?",
        (idle_before, limit),
    ).fetchall()
    return [str(r[0]) for r in rows]
