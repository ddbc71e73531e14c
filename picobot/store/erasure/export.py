"""Everything stored about one user, as a stream of export records.

:func:`iter_user_records` walks the database in a fixed order; the export formats
(:mod:`picobot.privacy.export`: JSON Lines and Markdown) are renderings of it.

Order: the header, the user's memories, their learned facts (each with its sources and
change history), their reflections, digests and message pins, then each session (oldest
first) followed by its summary, its messages in ``seq_order`` (each with its embedding,
if one is stored) and its tool records, then
the user's rows of the webhook inbox and of the outbound reply queue, then the user's
events (what happened, in order; ids and counts only), and last the user's privacy
switches (``preferences``, when they changed one). Every table is read
page by page with keyset pagination, so memory use does not grow with the export.
Reads are not one snapshot: rows written while an export runs may or may not appear.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from picobot.store.conversation.preferences import preference_rows
from picobot.store.db import Database, Row
from picobot.store.erasure.export_layers import layer_records
from picobot.store.erasure.export_pages import Record, iso
from picobot.store.erasure.export_pages import pages as _pages

FORMAT_VERSION = 1
"""Version of the JSONL record layout; bumped on any incompatible change."""


@dataclass(frozen=True, slots=True)
class ExportStats:
    """How many records of each kind an export holds (or wrote)."""

    sessions: int = 0
    messages: int = 0
    memories: int = 0
    summaries: int = 0
    tool_records: int = 0
    webhook_messages: int = 0
    outbound_replies: int = 0
    facts: int = 0
    reflections: int = 0
    digests: int = 0
    pins: int = 0

    @property
    def empty(self) -> bool:
        """True when nothing at all is stored about the user."""
        return (
            self.sessions == 0
            and self.memories == 0
            and self.webhook_messages == 0
            and self.outbound_replies == 0
            and self.facts == 0
            and self.reflections == 0
            and self.digests == 0
        )


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
        "  WHERE s.user_id = ?1),"
        " (SELECT COUNT(*) FROM webhook_inbox WHERE user_id = ?1),"
        " (SELECT COUNT(*) FROM outbound_queue WHERE user_id = ?1),"
        " (SELECT COUNT(*) FROM facts WHERE user_id = ?1),"
        " (SELECT COUNT(*) FROM digests WHERE user_id = ?1 AND level = 0 AND text <> ''),"
        " (SELECT COUNT(*) FROM digests WHERE user_id = ?1 AND level > 0 AND text <> ''),"
        " (SELECT COUNT(*) FROM message_pins WHERE user_id = ?1)",
        (user_id,),
    )
    assert row is not None  # an aggregate query always returns one row
    return ExportStats(*(int(v) for v in row))


async def iter_user_records(
    db: Database, user_id: str, *, exported_at: float | None = None
) -> AsyncIterator[Record]:
    """Every record stored about ``user_id``, in export order (see the module docstring).

    Each record is a plain JSON-ready dict whose ``type`` is one of ``export_header``,
    ``memory``, ``fact``, ``reflection``, ``digest``, ``pin``, ``session``, ``summary``,
    ``message``, ``tool_record``, ``webhook_message``, ``outbound_reply``, ``event``,
    ``preferences``.
    """
    yield {
        "type": "export_header",
        "user_id": user_id,
        "exported_at": iso(time.time() if exported_at is None else exported_at),
        "format_version": FORMAT_VERSION,
    }
    async for row in _pages(
        db,
        "SELECT id, picobot_open(key) AS key, picobot_open(content) AS content, created_at,"
        " updated_at, sensitive"
        " FROM user_memories"
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
            "sensitive": bool(row["sensitive"]),
        }
    async for record in fact_records(db, user_id):
        yield record
    async for record in layer_records(db, user_id):
        yield record
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
    for kind, table, plain, times in _WEBHOOK_TABLES:
        columns = (f"picobot_open({c}) AS {c}" if c == "text" else c for c in (*plain, *times))
        async for row in _pages(
            db,
            f"SELECT id, {', '.join(columns)} FROM {table}"  # noqa: S608 - fixed names
            " WHERE user_id = ? AND id > ? ORDER BY id LIMIT ?",
            (user_id,),
            key=lambda r: (r["id"],),
            start=(0,),
        ):
            yield {
                "type": kind,
                **{name: row[name] for name in plain},
                **{name: _iso_or_none(row[name]) for name in times},
            }
    async for row in _pages(
        db,
        "SELECT id, at, session_id, type, actor, payload_json FROM events"
        " WHERE user_id = ? AND id > ? ORDER BY id LIMIT ?",
        (user_id,),
        key=lambda r: (r["id"],),
        start=(0,),
    ):
        yield {
            "type": "event",
            "id": row["id"],
            "event": row["type"],
            "at": iso(row["at"]),
            "session_id": row["session_id"],
            "actor": row["actor"],
            "payload": _state(row["payload_json"]),
        }
    for learning, recall, updated in await db.read(lambda c: preference_rows(c, user_id)):
        yield {
            "type": "preferences",
            "learning": learning,
            "recall": recall,
            "updated_at": iso(updated),
        }


# The webhook tables' rows of the user: (record type, table, columns, times); their
# ``text`` is sealed, and read opened.
_WEBHOOK_TABLES = (
    (
        "webhook_message",
        "webhook_inbox",
        ("platform", "message_id", "chat_id", "text", "status"),
        ("received_at", "processed_at"),
    ),
    (
        "outbound_reply",
        "outbound_queue",
        ("platform", "chat_id", "text", "status", "attempts"),
        ("created_at", "sent_at"),
    ),
)


async def fact_records(db: Database, user_id: str) -> AsyncIterator[Record]:
    """The ``fact`` records of ``user_id``: each fact with its sources and history."""
    async for row in _pages(
        db,
        "SELECT id, picobot_open(subject) AS subject, category, picobot_open(text) AS text,"
        " confidence, active, pinned, created_at, updated_at FROM facts"
        " WHERE user_id = ? AND id > ? ORDER BY id LIMIT ?",
        (user_id,),
        key=lambda r: (r["id"],),
        start=(0,),
    ):
        sources = await db.fetchall(
            "SELECT session_id, message_id, created_at FROM fact_sources WHERE fact_id = ?"
            " ORDER BY id",
            (row["id"],),
        )
        history = await db.fetchall(
            "SELECT at, reason, picobot_open(old_text) AS old_text, picobot_open(new_text)"
            " AS new_text, old_confidence, new_confidence,"
            " old_active, new_active, session_id, actor FROM fact_history WHERE fact_id = ?"
            " ORDER BY id",
            (row["id"],),
        )
        yield {
            "type": "fact",
            "id": row["id"],
            "subject": row["subject"],
            "category": row["category"],
            "text": row["text"],
            "confidence": row["confidence"],
            "active": bool(row["active"]),
            "pinned": bool(row["pinned"]),
            "created_at": iso(row["created_at"]),
            "updated_at": iso(row["updated_at"]),
            "sources": [
                {
                    "session_id": s["session_id"],
                    "message_id": s["message_id"],
                    "created_at": iso(s["created_at"]),
                }
                for s in sources
            ],
            "history": [
                {**{k: h[k] for k in h.keys() if k != "at"}, "at": iso(h["at"])}  # noqa: SIM118
                for h in history
            ],
        }


def _iso_or_none(ts: float | None) -> str | None:
    return None if ts is None else iso(ts)


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
        "SELECT picobot_open(summary) AS summary, covered_seq, updated_at"
        " FROM session_summaries WHERE session_id = ?",
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
        "SELECT m.seq_order, m.role, picobot_open(m.content) AS content, m.token_estimate,"
        " m.created_at, v.model AS vector_model, picobot_open_bytes(v.vector) AS vector"
        " FROM messages m"
        " LEFT JOIN message_vectors v ON v.message_id = m.id"
        " WHERE m.session_id = ? AND m.seq_order > ? ORDER BY m.seq_order LIMIT ?",
        (sid,),
        key=lambda r: (r["seq_order"],),
        start=(0,),
    ):
        record: Record = {
            "type": "message",
            "session_id": sid,
            "seq_order": msg["seq_order"],
            "role": msg["role"],
            "content": msg["content"],
            "token_estimate": msg["token_estimate"],
            "created_at": iso(msg["created_at"]),
        }
        if msg["vector"] is not None:
            # The message's embedding (recall by meaning) is data about the user too.
            record["embedding"] = {
                "model": msg["vector_model"],
                "encoding": "float16le-base64",
                "vector": base64.b64encode(msg["vector"]).decode("ascii"),
            }
        yield record
    async for tool in _pages(
        db,
        "SELECT id, picobot_open(name) AS name, picobot_open(arguments) AS arguments,"
        " picobot_open(result) AS result, ok, created_at FROM tool_records"
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
