"""Migration of the memory layers: message pins, session reflections and digests.

Kept apart from :mod:`picobot.store.migrations`, which lists it in order; see there for
the rules (never edit a released migration).
"""

from __future__ import annotations

from picobot.store.connection import AsyncConnection
from picobot.store.migrations.facts import FACT_ROWID_BASE
from picobot.store.migrations.script import run_script

REFLECTION_ROWID_BASE = 2 * FACT_ROWID_BASE
"""A reflection's recall-index rowid is ``-(REFLECTION_ROWID_BASE + digests.id)``."""
DIGEST_ROWID_BASE = 3 * FACT_ROWID_BASE
"""A digest's (level 1 and up) recall-index rowid is ``-(DIGEST_ROWID_BASE + digests.id)``;
both lie below every fact's, so the sign and size of a rowid still name its kind."""


def _rowid(row: str) -> str:
    """The SQL of a ``digests`` row's index rowid (``row`` is NEW or OLD)."""
    return (
        f"-((CASE WHEN {row}.level = 0 THEN {REFLECTION_ROWID_BASE}"
        f" ELSE {DIGEST_ROWID_BASE} END) + {row}.id)"
    )


async def m015_memory_layers(conn: AsyncConnection) -> None:
    """``message_pins``, and ``digests``: session reflections (level 0) and digests.

    A pin names one of its user's messages; retention keeps a pinned message and its
    session (purges delete both, and the pin with them). A ``digests`` row of level 0
    is the reflection of one session's message range (``session_id``, first/last
    message id and ``seq_order``); a row of level L >= 1 folds rows of level L-1, which
    point at it through ``parent_id``. ``stale`` marks a digest whose sources changed
    (a session purge): its text is emptied at once and rebuilt from what remains.
    Neither references ``sessions``: they are derived data that outlive retention.
    Rows with text are in the recall index (``search_index``) with per-user terms,
    rowid ``-(2**41 + id)`` for a reflection and ``-(3 * 2**40 + id)`` for a digest.
    """
    body = "picobot_index_text(NEW.user_id, NEW.text)"
    new, old = _rowid("NEW"), _rowid("OLD")
    await run_script(
        conn,
        # Every interpolated piece is a constant of this module.
        f"""
        CREATE TABLE message_pins (
            message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            user_id TEXT NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE INDEX message_pins_by_user ON message_pins(user_id, message_id);
        CREATE INDEX message_pins_by_session ON message_pins(session_id);
        CREATE TABLE digests (
            id INTEGER PRIMARY KEY,
            user_id TEXT NOT NULL,
            level INTEGER NOT NULL CHECK (level >= 0),
            session_id TEXT,
            first_message_id INTEGER,
            last_message_id INTEGER,
            first_seq INTEGER,
            last_seq INTEGER,
            text TEXT NOT NULL,
            token_estimate INTEGER NOT NULL,
            parent_id INTEGER REFERENCES digests(id) ON DELETE SET NULL,
            stale INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE INDEX digests_by_user ON digests(user_id, level, parent_id, id);
        CREATE INDEX digests_by_session ON digests(session_id, last_seq);
        CREATE INDEX digests_by_parent ON digests(parent_id);
        CREATE TRIGGER search_digests_ai AFTER INSERT ON digests WHEN NEW.text <> '' BEGIN
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            VALUES ({new}, 'u' || lower(hex(NEW.user_id)) || 'x', {body},
                    NULL, NULL, NEW.updated_at);
        END;
        CREATE TRIGGER search_digests_ad AFTER DELETE ON digests BEGIN
            DELETE FROM search_index WHERE rowid = {old};
        END;
        CREATE TRIGGER search_digests_au AFTER UPDATE OF user_id, text ON digests BEGIN
            DELETE FROM search_index WHERE rowid = {old};
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            SELECT {new}, 'u' || lower(hex(NEW.user_id)) || 'x', {body},
                   NULL, NULL, NEW.updated_at
            WHERE NEW.text <> '';
        END;
        """,  # noqa: S608
    )
