"""What a purge removes (or would remove), counted by kind of row, and how it reads."""

from __future__ import annotations

from dataclasses import dataclass, fields


def index_entries(rowids: str) -> str:
    """An SQL expression counting the recall-index entries of the records whose encoded
    rowids (see :mod:`picobot.store.retrieval.search_kinds`) the subquery ``rowids``
    selects, as one purge count: ``search_index`` rows, and rowids still queued for the
    indexer in ``search_pending``. A record has at most one of the two (SQLite indexes
    notes, facts and digests as they are written, PostgreSQL queues them), so either
    engine counts one entry per indexed record. ``rowids`` appears twice: its parameters
    must be numbered (``?1``) or passed twice."""
    return (
        f"(SELECT COUNT(*) FROM search_index WHERE rowid IN ({rowids}))"  # noqa: S608
        f" + (SELECT COUNT(*) FROM search_pending WHERE id IN ({rowids}))"
    )


_NAMES = {
    "sessions": ("session", "sessions"),
    "messages": ("message", "messages"),
    "summaries": ("summary", "summaries"),
    "memories": ("memory", "memories"),
    "index_entries": ("index entry", "index entries"),
    "tool_records": ("tool record", "tool records"),
    "webhook_rows": ("webhook queue entry", "webhook queue entries"),
    "facts": ("learned fact", "learned facts"),
    "digests": ("reflection or digest", "reflections and digests"),
}


@dataclass(frozen=True, slots=True)
class PurgeCounts:
    """How many rows of each kind a purge removes (or removed)."""

    sessions: int = 0
    messages: int = 0
    summaries: int = 0
    memories: int = 0
    index_entries: int = 0
    """Recall index entries, one per indexed message, memory, fact or digest: rows of
    ``search_index`` (with, on PostgreSQL, their ``search_terms``, which go with them), or
    rowids still queued for it (``search_pending``), and a message's vector."""
    tool_records: int = 0
    webhook_rows: int = 0
    """Inbox and outbound-queue rows of the messaging channels (they hold text too)."""
    facts: int = 0
    """Learned facts (with their sources and history); see picobot.store.learned.fact_purge."""
    digests: int = 0
    """Session reflections and digests; see picobot.store.learned.digest_purge."""

    @property
    def total(self) -> int:
        """All rows together, index entries included; 0 means there is nothing to delete."""
        return sum(int(getattr(self, f.name)) for f in fields(self))

    def describe(self) -> str:
        """One human line, e.g. ``3 sessions, 120 messages, 1 summary, ...``."""
        parts = []
        for f in fields(self):
            n = int(getattr(self, f.name))
            one, many = _NAMES[f.name]
            if n:  # kinds with nothing to delete would only be noise in a prompt
                parts.append(f"{n} {one if n == 1 else many}")
        return ", ".join(parts) or "nothing"

    def __add__(self, other: PurgeCounts) -> PurgeCounts:
        return PurgeCounts(
            *(int(getattr(self, f.name)) + int(getattr(other, f.name)) for f in fields(self))
        )
