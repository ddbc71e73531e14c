"""Export everything stored about one user, as JSON Lines or Markdown.

Both formats are renderings of one record stream, the store's
(:func:`~picobot.store.erasure.export.iter_user_records`): :func:`iter_user_jsonl` (used by the
admin HTTP API for streamed downloads) serializes each record as a line, and
:func:`export_user` writes either that or the Markdown view to a text stream.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import IO, Literal

from picobot.privacy.export_markdown import MarkdownRenderer
from picobot.store.db import Database
from picobot.store.erasure.export import ExportStats, count_user_data, iter_user_records
from picobot.store.erasure.export_pages import Record

ExportFormat = Literal["jsonl", "markdown"]


def jsonl_line(record: Record) -> str:
    """One record as a JSON Lines line (newline included, non-ASCII kept readable)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


async def iter_user_jsonl(
    db: Database, user_id: str, *, exported_at: float | None = None
) -> AsyncIterator[str]:
    """The JSONL export of ``user_id``, one line (ending in ``\\n``) at a time."""
    async for record in iter_user_records(db, user_id, exported_at=exported_at):
        yield jsonl_line(record)


_COUNTED = (
    "session",
    "message",
    "memory",
    "summary",
    "tool_record",
    "webhook_message",
    "outbound_reply",
    "fact",
    "reflection",
    "digest",
    "pin",
)
"""The record types :class:`ExportStats` counts, in the order of its fields."""


async def export_user(
    db: Database,
    user_id: str,
    out: IO[str],
    *,
    fmt: ExportFormat = "jsonl",
    progress: Callable[[int, int], None] | None = None,
) -> ExportStats:
    """Write everything stored about ``user_id`` to ``out``; return what was written.

    ``progress(done, total)`` is called once before the first message and after each
    message written; ``total`` is counted up front, so it grows if messages arrive
    during the export rather than ever being smaller than ``done``.
    """
    counts = dict.fromkeys(_COUNTED, 0)
    total = (await count_user_data(db, user_id)).messages if progress else 0
    if progress:
        progress(0, total)
    render = MarkdownRenderer(out) if fmt == "markdown" else None
    async for record in iter_user_records(db, user_id):
        kind = record["type"]
        if render is None:
            out.write(jsonl_line(record))
        else:
            render.write(record)
        if kind in counts:
            counts[kind] += 1
        if kind == "message" and progress:
            done = counts["message"]
            total = max(total, done)
            progress(done, total)
    if render is not None:
        render.finish()
    return ExportStats(*counts.values())
