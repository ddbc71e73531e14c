"""Export everything stored about one user, as JSON Lines or Markdown.

One record stream (:func:`iter_user_records`) walks the database in a fixed order and
both formats are renderings of it: :func:`iter_user_jsonl` (used by the admin HTTP
API for streamed downloads) serializes each record as a line, and :func:`export_user`
writes either that or the Markdown view to a text stream.

Order: the header, the user's memories, then each session (oldest first) followed by
its summary, its messages in ``seq_order`` and its tool records. Every table is read
page by page with keyset pagination, so memory use does not grow with the export.
Reads are not one snapshot: rows written while an export runs may or may not appear.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any, Literal

from picobot.store.db import Database, Row

FORMAT_VERSION = 1
"""Version of the JSONL record layout; bumped on any incompatible change."""

PAGE_SIZE = 500
"""Rows read per query; bounds memory whatever the size of the export."""

Record = dict[str, Any]
ExportFormat = Literal["jsonl", "markdown"]


@dataclass(frozen=True, slots=True)
class ExportStats:
    """How many records of each kind an export holds (or wrote)."""

    sessions: int = 0
    messages: int = 0
    memories: int = 0
    summaries: int = 0
    tool_records: int = 0

    @property
    def empty(self) -> bool:
        """True when nothing at all is stored about the user."""
        return self.sessions == 0 and self.memories == 0


def iso(ts: float) -> str:
    """A unix time as ISO 8601 in UTC (microsecond precision)."""
    return datetime.fromtimestamp(ts, UTC).isoformat()


async def count_user_data(db: Database, user_id: str) -> ExportStats:
    """What an export of ``user_id`` would contain, counted without reading the text."""
    row = await db.fetchone(
        "SELECT"
        " (SELECT COUNT(*) FROM sessions WHERE user_id = ?1),"
        " (SELECT COUNT(*) FROM messages m JOIN sessions s ON s.id = m.session_id"
        "  WHERE s.user_id = ?1),"
        " (SELECT COUNT(*) FROM user_memories WHERE user_id = ?1),"
        " (SELECT COUNT(*) FROM session_summaries x JOIN sessions s ON s.id = x.session_id"
        "  WHERE s.user_id = ?1),"
        " (SELECT COUNT(*) FROM tool_records t JOIN sessions s ON s.id = t.session_id"
        "  WHERE s.user_id = ?1)",
        (user_id,),
    )
    assert row is not None  # an aggregate query always returns one row
    return ExportStats(*(int(v) for v in row))


async def iter_user_records(
    db: Database, user_id: str, *, exported_at: float | None = None
) -> AsyncIterator[Record]:
    """Every record stored about ``user_id``, in export order (see the module docstring).

    Each record is a plain JSON-ready dict whose ``type`` is one of ``export_header``,
    ``memory``, ``session``, ``summary``, ``message``, ``tool_record``.
    """
    yield {
        "type": "export_header",
        "user_id": user_id,
        "exported_at": iso(time.time() if exported_at is None else exported_at),
        "format_version": FORMAT_VERSION,
    }
    async for row in _pages(
        db,
        "SELECT id, key, content, created_at, updated_at FROM user_memories"
        " WHERE user_id = ? AND id > ? ORDER BY id LIMIT ?",
        (user_id,),
        key=lambda r: (r["id"],),
        start=(0,),
    ):
        yield {
            "type": "memory",
            "key": row["key"],
            "content": row["content"],
            "created_at": iso(row["created_at"]),
            "updated_at": iso(row["updated_at"]),
        }
    async for session in _pages(
        db,
        "SELECT id, parent_session_id, channel, chat_id, user_id, created_at, last_active,"
        " state_json FROM sessions WHERE user_id = ? AND (created_at, id) > (?, ?)"
        " ORDER BY created_at, id LIMIT ?",
        (user_id,),
        key=lambda r: (r["created_at"], r["id"]),
        start=(float("-inf"), ""),
    ):
        async for record in _session_records(db, session):
            yield record


async def _session_records(db: Database, session: Row) -> AsyncIterator[Record]:
    """One session: its own record, its summary, its messages, its tool records."""
    sid = session["id"]
    yield {
        "type": "session",
        "id": sid,
        "user_id": session["user_id"],
        "parent_session_id": session["parent_session_id"],
        "channel": session["channel"],
        "chat_id": session["chat_id"],
        "created_at": iso(session["created_at"]),
        "last_active": iso(session["last_active"]),
        "state": _state(session["state_json"]),
    }
    summary = await db.fetchone(
        "SELECT summary, covered_seq, updated_at FROM session_summaries WHERE session_id = ?",
        (sid,),
    )
    if summary is not None:
        yield {
            "type": "summary",
            "session_id": sid,
            "summary": summary["summary"],
            "covered_seq": summary["covered_seq"],
            "updated_at": iso(summary["updated_at"]),
        }
    async for msg in _pages(
        db,
        "SELECT seq_order, role, content, token_estimate, created_at FROM messages"
        " WHERE session_id = ? AND seq_order > ? ORDER BY seq_order LIMIT ?",
        (sid,),
        key=lambda r: (r["seq_order"],),
        start=(0,),
    ):
        yield {
            "type": "message",
            "session_id": sid,
            "seq_order": msg["seq_order"],
            "role": msg["role"],
            "content": msg["content"],
            "token_estimate": msg["token_estimate"],
            "created_at": iso(msg["created_at"]),
        }
    async for tool in _pages(
        db,
        "SELECT id, name, arguments, result, ok, created_at FROM tool_records"
        " WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?",
        (sid,),
        key=lambda r: (r["id"],),
        start=(0,),
    ):
        yield {
            "type": "tool_record",
            "session_id": sid,
            "name": tool["name"],
            "arguments": tool["arguments"],
            "result": tool["result"],
            "ok": bool(tool["ok"]),
            "created_at": iso(tool["created_at"]),
        }


def _state(raw: str) -> Any:
    # The column is JSON text written by PicoBot; a damaged value is still the user's
    # data, so it is exported as the raw string rather than dropped.
    try:
        return json.loads(raw)
    except ValueError:
        return raw


async def _pages(
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


def jsonl_line(record: Record) -> str:
    """One record as a JSON Lines line (newline included, non-ASCII kept readable)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


async def iter_user_jsonl(
    db: Database, user_id: str, *, exported_at: float | None = None
) -> AsyncIterator[str]:
    """The JSONL export of ``user_id``, one line (ending in ``\\n``) at a time."""
    async for record in iter_user_records(db, user_id, exported_at=exported_at):
        yield jsonl_line(record)


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
    counts = {"session": 0, "message": 0, "memory": 0, "summary": 0, "tool_record": 0}
    total = (await count_user_data(db, user_id)).messages if progress else 0
    if progress:
        progress(0, total)
    render = _MarkdownRenderer(out) if fmt == "markdown" else None
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
    return ExportStats(
        sessions=counts["session"],
        messages=counts["message"],
        memories=counts["memory"],
        summaries=counts["summary"],
        tool_records=counts["tool_record"],
    )


def _when(iso_text: str) -> str:
    return datetime.fromisoformat(iso_text).strftime("%Y-%m-%d %H:%M:%S UTC")


def _quote(text: str) -> str:
    # Stored text is shown as a blockquote: a line of a message that looks like a
    # heading ("## Session ...") or a list then cannot break the document's structure.
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines() or [""])


class _MarkdownRenderer:
    """Writes the human-readable view of the record stream, record by record."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._memories = 0
        self._in_memories = False

    def _emit(self, *blocks: str) -> None:
        for block in blocks:
            self._out.write(block + "\n\n")

    def _close_memories(self) -> None:
        if self._in_memories and self._memories == 0:
            self._emit("_No memories stored._")
        self._in_memories = False

    def write(self, record: Record) -> None:
        """Render one record (they arrive in the order of :func:`iter_user_records`)."""
        kind = record["type"]
        if kind == "export_header":
            self._emit(
                f"# PicoBot data export for `{record['user_id']}`",
                f"Exported {_when(record['exported_at'])}; all times are UTC.",
                "## Memories",
            )
            self._in_memories = True
        elif kind == "memory":
            self._memories += 1
            self._emit(
                f"**{record['key']}** (updated {_when(record['updated_at'])}):",
                _quote(record["content"]),
            )
        elif kind == "session":
            self._close_memories()
            self._emit(
                f"## Session {record['id']} ({_when(record['created_at'])} to "
                f"{_when(record['last_active'])})",
                f"Channel `{record['channel']}`, chat `{record['chat_id']}`"
                + (
                    f", forked from session {record['parent_session_id']}."
                    if record["parent_session_id"]
                    else "."
                ),
            )
        elif kind == "summary":
            self._emit(
                f"**Summary** of messages 1 to {record['covered_seq']} "
                f"(updated {_when(record['updated_at'])}):",
                _quote(record["summary"]),
            )
        elif kind == "message":
            self._emit(
                f"**{record['role']}** ({_when(record['created_at'])}):",
                _quote(record["content"]),
            )
        elif kind == "tool_record":
            status = "ok" if record["ok"] else "failed"
            self._emit(
                f"**tool call** {record['name']} ({_when(record['created_at'])}, {status}):",
                _quote("arguments: " + record["arguments"]),
                _quote("result: " + record["result"]),
            )

    def finish(self) -> None:
        """Close the document (a user with memories but no sessions still gets a note)."""
        self._close_memories()
