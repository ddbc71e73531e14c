"""Sealing what a database stored in clear before per-user keys (``picobot migrate``).

Every sealed column is listed here with the SQL that names the owner of its row. Rows
are sealed in small batches, each its own write, so the server can keep serving; a
batch interrupted (kill -9) is rolled back whole, and the next run starts from the
rows still in clear, so the backfill resumes wherever it stopped.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from picobot.store.db import Database

BATCH_ROWS = 500
"""Rows sealed per write: a few milliseconds of the writer each."""


@dataclass(frozen=True)
class SealedColumn:
    """A column that holds a user's text (or vector), and how to find its owner."""

    table: str
    column: str
    owner: str
    """SQL of the owning user id, evaluated on the row (``t`` is the table's alias)."""
    function: str = "picobot_seal"
    """How a value is sealed: ``picobot_seal`` (a text), ``picobot_seal_bytes`` (a
    vector) or ``picobot_tag`` (the lookup tag of the name in column ``name``)."""
    name: str | None = None
    """For a tag column, the column of the name it is the tag of (sealed after it: a
    row is found by its tag, or by its name while that is in clear, at every step)."""

    @property
    def value(self) -> str:
        """SQL of the column's sealed value, from the row as it stands."""
        source = f"picobot_open(t.{self.name})" if self.name else f"t.{self.column}"
        return f"{self.function}({self.owner}, {source})"


SEALED_COLUMNS: tuple[SealedColumn, ...] = (
    SealedColumn(
        "messages", "content", "(SELECT s.user_id FROM sessions s WHERE s.id = t.session_id)"
    ),
    SealedColumn("user_memories", "content", "t.user_id"),
    SealedColumn("user_memories", "key_tag", "t.user_id", "picobot_tag", "key"),
    SealedColumn("user_memories", "key", "t.user_id"),
    SealedColumn(
        "session_summaries",
        "summary",
        "(SELECT s.user_id FROM sessions s WHERE s.id = t.session_id)",
    ),
    SealedColumn("facts", "text", "t.user_id"),
    SealedColumn("facts", "subject_tag", "t.user_id", "picobot_tag", "subject"),
    SealedColumn("facts", "subject", "t.user_id"),
    SealedColumn(
        "fact_history", "old_text", "(SELECT f.user_id FROM facts f WHERE f.id = t.fact_id)"
    ),
    SealedColumn(
        "fact_history", "new_text", "(SELECT f.user_id FROM facts f WHERE f.id = t.fact_id)"
    ),
    SealedColumn("digests", "text", "t.user_id"),
    SealedColumn("tool_records", "name", "t.user_id"),
    SealedColumn("tool_records", "arguments", "t.user_id"),
    SealedColumn("tool_records", "result", "t.user_id"),
    SealedColumn("webhook_inbox", "text", "t.user_id"),
    SealedColumn("outbound_queue", "text", "t.user_id"),
    SealedColumn(
        "message_vectors",
        "vector",
        "(SELECT s.user_id FROM messages m JOIN sessions s ON s.id = m.session_id"
        " WHERE m.id = t.message_id)",
        "picobot_seal_bytes",
    ),
)
"""Every column the store seals: what the backfill walks and the tests check.

The store's other text columns hold no words of a user: ids, times, statuses, counts, a
fact's category (one of a fixed list), PicoBot's own tool names in events."""


def _clear(column: SealedColumn) -> str:
    """SQL true for a row whose column is still in clear (and not empty)."""
    if column.function == "picobot_seal_bytes":
        # A sealed vector has an odd length, a clear one (float16s) an even one.
        return f"length(t.{column.column}) % 2 = 0"
    if column.name is not None:
        # A tag is a blob; a text one is the name itself (written without a key store).
        # Only a name still in clear is tagged: an erased one has nothing to find.
        return f"typeof(t.{column.column}) <> 'blob' AND typeof(t.{column.name}) = 'text'"
    return f"typeof(t.{column.column}) = 'text' AND t.{column.column} <> ''"


def _rowid(column: SealedColumn) -> str:
    return "message_id" if column.table == "message_vectors" else "rowid"


async def count_clear(db: Database) -> int:
    """How many rows still hold a user's text in clear (none on PostgreSQL, where every
    value is sealed as it is written)."""
    if not db.engine.file:
        return 0

    def count(conn: sqlite3.Connection) -> int:
        total = 0
        for c in SEALED_COLUMNS:
            sql = f"SELECT COUNT(*) FROM {c.table} t WHERE {_clear(c)}"  # noqa: S608 - constants
            total += int(conn.execute(sql).fetchone()[0])
        return total

    return await db.read(count)


async def seal_existing(
    db: Database, *, batch: int = BATCH_ROWS, progress: Callable[[str, int], None] | None = None
) -> int:
    """Seal every row still in clear, ``batch`` rows per write; how many were sealed.

    Needs a key store (``db.sealer.ring``); without one, nothing is done; nor on
    PostgreSQL (nothing there was ever stored in clear). ``progress`` hears
    ``(table.column, rows sealed so far)`` after each batch.
    """
    if db.sealer.ring is None or not db.engine.file:
        return 0
    done = 0
    for c in SEALED_COLUMNS:
        key = _rowid(c)
        sealed_here = 0
        while True:

            def step(conn: sqlite3.Connection, c: SealedColumn = c, key: str = key) -> int:
                ids = [
                    int(r[0])
                    for r in conn.execute(
                        f"SELECT t.{key} FROM {c.table} t WHERE {_clear(c)}"  # noqa: S608
                        f" ORDER BY t.{key} LIMIT ?",
                        (batch,),
                    )
                ]
                if not ids:
                    return 0
                conn.execute(
                    f"UPDATE {c.table} AS t SET {c.column} = {c.value}"  # noqa: S608
                    f" WHERE t.{key} IN (SELECT value FROM json_each(?))",
                    (str(ids),),
                )
                return len(ids)

            n = await db.write(step)
            if n == 0:
                break
            sealed_here += n
            done += n
            if progress is not None:
                progress(f"{c.table}.{c.column}", sealed_here)
    return done
