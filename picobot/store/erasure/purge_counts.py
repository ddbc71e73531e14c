"""What a purge removes (or would remove), counted by kind of row, and how it reads."""

from __future__ import annotations

from dataclasses import dataclass, fields

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
    """Recall index entries, one per user/assistant message and memory: rows of the
    ``search_index`` FTS table, and messages still queued for it (``search_pending``)."""
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
