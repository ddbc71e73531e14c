"""Looking for text in every row of a PostgreSQL store: the row-level counterpart of the
byte scans of a SQLite data directory (tests/privacy/test_erasure.py)."""

from __future__ import annotations

from collections.abc import Iterable

from picobot.store.db import Database


async def rows_holding(db: Database, needles: Iterable[str]) -> dict[str, list[str]]:
    """Each needle found in a row of any of the store's tables, with those tables.

    A row is searched as PostgreSQL's text form of the whole row, every column included
    (``BYTEA`` as hex, so a needle stored as bytes is looked for in hex too). Sealed
    columns hold ciphertext: a needle found is text stored in the clear.
    """
    from picobot.store.postgres.schema import table_names  # psycopg: the [postgres] extra

    found: dict[str, list[str]] = {}
    for needle in needles:
        forms = (needle, needle.encode().hex())
        for table in table_names():
            # The table names are the schema's own, never caller input.
            row = await db.fetchone(
                f"SELECT COUNT(*) FROM {table} t WHERE strpos(CAST(t AS TEXT), ?) > 0"  # noqa: S608
                " OR strpos(CAST(t AS TEXT), ?) > 0",
                forms,
            )
            if row is not None and int(row[0]):
                found.setdefault(needle, []).append(table)
    return found
