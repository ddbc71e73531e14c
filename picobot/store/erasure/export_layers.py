"""The export records of a user's reflections, digests and message pins.

``reflection``: one session reflection with its provenance (session, message id range).
``digest``: one digest with its level and the ids of the rows it folds (reflections for
level 1, digests below). ``pin``: one pinned message (the message itself is in its
session's records). Rows that only mark a range as read (a dropped answer) hold no
text and are left out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from picobot.store.db import Database
from picobot.store.erasure.export_pages import Record, iso, pages


async def layer_records(db: Database, user_id: str) -> AsyncIterator[Record]:
    """``user_id``'s ``reflection``, ``digest`` and ``pin`` records, in that order."""
    async for row in pages(
        db,
        "SELECT id, level, session_id, first_message_id, last_message_id,"
        " picobot_open(text) AS text, parent_id,"
        " stale, created_at, updated_at FROM digests WHERE user_id = ? AND text <> ''"
        " AND (level, id) > (?, ?) ORDER BY level, id LIMIT ?",
        (user_id,),
        key=lambda r: (r["level"], r["id"]),
        start=(-1, 0),
    ):
        common = {
            "id": row["id"],
            "text": row["text"],
            "created_at": iso(row["created_at"]),
            "updated_at": iso(row["updated_at"]),
            "folded_into": row["parent_id"],
        }
        if row["level"] == 0:
            yield {
                "type": "reflection",
                **common,
                "session_id": row["session_id"],
                "first_message_id": row["first_message_id"],
                "last_message_id": row["last_message_id"],
            }
            continue
        sources = await db.fetchall(
            "SELECT id FROM digests WHERE parent_id = ? ORDER BY id", (row["id"],)
        )
        yield {
            "type": "digest",
            **common,
            "level": row["level"],
            "sources": [int(s["id"]) for s in sources],
        }
    async for row in pages(
        db,
        "SELECT message_id, session_id, created_at FROM message_pins WHERE user_id = ?"
        " AND message_id > ? ORDER BY message_id LIMIT ?",
        (user_id,),
        key=lambda r: (r["message_id"],),
        start=(0,),
    ):
        yield {
            "type": "pin",
            "message_id": row["message_id"],
            "session_id": row["session_id"],
            "pinned_at": iso(row["created_at"]),
        }
