"""The migration of learned facts (``facts``, their provenance and history)."""

from __future__ import annotations

from picobot.store.connection import AsyncConnection
from picobot.store.migrations.revisions import revision_triggers, revisions_table
from picobot.store.migrations.script import run_script

FACT_ROWID_BASE = 1 << 40
"""A fact's recall-index rowid is ``-(FACT_ROWID_BASE + facts.id)``: below every
memory's (``-user_memories.id``), so the sign and size of a rowid name its kind."""


async def m012_learned_facts(conn: AsyncConnection) -> None:
    """Learned facts: one row per fact, its sources (provenance) and its change history.

    ``fact_sources`` names the sessions and messages a fact was learned or reinforced
    from (a NULL session: an operator made it), so a session purge can remove exactly
    the facts learned only there. ``fact_history`` records every change with its
    reason. ``fact_progress`` remembers the last message of each session extraction
    has read (ids only). Active facts are in the recall index (``search_index``) with
    per-user terms like memories, rowid ``-(2**40 + id)``; triggers keep it in step.
    """
    base = FACT_ROWID_BASE
    body = "picobot_index_text(NEW.user_id, COALESCE(NEW.subject || ': ', '') || NEW.text)"
    await run_script(
        conn,
        # base and body are constants of this module.
        f"""
        CREATE TABLE facts (
            id INTEGER PRIMARY KEY,
            user_id TEXT NOT NULL,
            subject TEXT,
            category TEXT NOT NULL,
            text TEXT NOT NULL,
            confidence REAL NOT NULL,
            active INTEGER NOT NULL DEFAULT 1,
            pinned INTEGER NOT NULL DEFAULT 0,
            decay_steps INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE INDEX facts_by_user ON facts(user_id, active, confidence DESC);
        CREATE INDEX facts_by_key ON facts(user_id, category, subject);
        CREATE INDEX facts_by_age ON facts(active, pinned, updated_at);
        CREATE TABLE fact_sources (
            id INTEGER PRIMARY KEY,
            fact_id INTEGER NOT NULL REFERENCES facts(id) ON DELETE CASCADE,
            session_id TEXT,
            message_id INTEGER,
            created_at REAL NOT NULL
        );
        CREATE INDEX fact_sources_by_fact ON fact_sources(fact_id);
        CREATE INDEX fact_sources_by_session ON fact_sources(session_id);
        CREATE TABLE fact_history (
            id INTEGER PRIMARY KEY,
            fact_id INTEGER NOT NULL REFERENCES facts(id) ON DELETE CASCADE,
            at REAL NOT NULL,
            reason TEXT NOT NULL,
            old_text TEXT,
            new_text TEXT,
            old_confidence REAL,
            new_confidence REAL,
            old_active INTEGER,
            new_active INTEGER,
            session_id TEXT,
            actor TEXT
        );
        CREATE INDEX fact_history_by_fact ON fact_history(fact_id);
        CREATE INDEX fact_history_by_session ON fact_history(session_id);
        CREATE TABLE fact_progress (
            session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
            covered_seq INTEGER NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE TRIGGER search_facts_ai AFTER INSERT ON facts WHEN NEW.active BEGIN
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            VALUES (-({base} + NEW.id), 'u' || lower(hex(NEW.user_id)) || 'x', {body},
                    NULL, NULL, NEW.updated_at);
        END;
        CREATE TRIGGER search_facts_ad AFTER DELETE ON facts BEGIN
            DELETE FROM search_index WHERE rowid = -({base} + OLD.id);
        END;
        CREATE TRIGGER search_facts_au AFTER UPDATE OF user_id, subject, text, active ON facts
        BEGIN
            DELETE FROM search_index WHERE rowid = -({base} + OLD.id);
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            SELECT -({base} + NEW.id), 'u' || lower(hex(NEW.user_id)) || 'x', {body},
                   NULL, NULL, NEW.updated_at
            WHERE NEW.active;
        END;
        """,  # noqa: S608
    )


async def m029_fact_revisions(conn: AsyncConnection) -> None:
    """A revision per user's facts, so a reader can tell whether they changed.

    As ``memory_revisions`` does for memories (m008): every insert, update or delete of
    a user's facts gives that user's row in ``fact_revisions`` a fresh value from
    ``revision_clock``, in the transaction of the change, whichever process makes it.
    A user without facts has no row (their last delete removes it, so a purged user's
    id does not stay behind). See picobot.store.learned.fact_cache.
    """
    table = revisions_table("fact_revisions", "facts")
    await run_script(conn, table + revision_triggers("facts", "facts", "fact_revisions"))
