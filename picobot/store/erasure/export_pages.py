"""Reading an export's tables page by page, and its time format (shared by its parts)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

from picobot.store.db import Database, Row

PAGE_SIZE = 500
"""Rows read per query; bounds memory whatever the size of the export."""

Record = dict[str, Any]


def iso(ts: float) -> str:
    """A unix time as ISO 8601 in UTC (microsecond precision)."""
    return datetime.fromtimestamp(ts, UTC).isoformat()


async def pages(
    db: Database,
    sql: str,
    params: tuple[Any, ...],
    *,
    key: Callable[[Row], tuple[Any, ...]],
    start: tuple[Any, ...],
) -> AsyncIterator[Row]:
    """Rows of a keyset-paginated query.

    ``sql`` takes ``params``, then the key of the last row seen, then the page size;
    ``key`` extracts that key from a row. Unlike OFFSET, each page is one index seek
    and rows inserted meanwhile cannot shift a page and repeat or skip rows.
    """
    last = start
    while True:
        rows = await db.fetchall(sql, (*params, *last, PAGE_SIZE))
        for row in rows:
            yield row
        if len(rows) < PAGE_SIZE:
            return
        last = key(rows[-1])
