"""The migration that lets the recall index read sealed notes and facts."""

from __future__ import annotations

from picobot.store.connection import AsyncConnection
from picobot.store.migrations.facts import FACT_ROWID_BASE
from picobot.store.migrations.script import run_script


def _index_triggers(note_body: str, fact_body: str) -> str:
    """The SQL replacing the index triggers of notes and facts, with these bodies (the
    SQL of a row's index text, ``NEW`` being the row)."""
    base = FACT_ROWID_BASE
    # base and the bodies are constants of this module.
    return f"""
        DROP TRIGGER search_memories_ai;
        DROP TRIGGER search_memories_au;
        CREATE TRIGGER search_memories_ai AFTER INSERT ON user_memories
        WHEN NEW.sensitive = 0 BEGIN
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            VALUES (-NEW.id, 'u' || lower(hex(NEW.user_id)) || 'x', {note_body},
                    NULL, NULL, NEW.updated_at);
        END;
        CREATE TRIGGER search_memories_au AFTER UPDATE ON user_memories BEGIN
            DELETE FROM search_index WHERE rowid = -OLD.id;
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            SELECT -NEW.id, 'u' || lower(hex(NEW.user_id)) || 'x', {note_body},
                   NULL, NULL, NEW.updated_at
            WHERE NEW.sensitive = 0;
        END;
        DROP TRIGGER search_facts_ai;
        DROP TRIGGER search_facts_au;
        CREATE TRIGGER search_facts_ai AFTER INSERT ON facts WHEN NEW.active BEGIN
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            VALUES (-({base} + NEW.id), 'u' || lower(hex(NEW.user_id)) || 'x', {fact_body},
                    NULL, NULL, NEW.updated_at);
        END;
        CREATE TRIGGER search_facts_au AFTER UPDATE OF user_id, subject, text, active ON facts
        BEGIN
            DELETE FROM search_index WHERE rowid = -({base} + OLD.id);
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            SELECT -({base} + NEW.id), 'u' || lower(hex(NEW.user_id)) || 'x', {fact_body},
                   NULL, NULL, NEW.updated_at
            WHERE NEW.active;
        END;
        """  # noqa: S608


async def m023_sealed_index_triggers(conn: AsyncConnection) -> None:
    """Index triggers of notes and facts that open their text before indexing it.

    Notes and fact texts are sealed with their user's key (picobot.store.keys); the
    triggers joined them to the note's key or the fact's subject as text, which a sealed
    value cannot be. Same rows, same rowids; the terms come from the opened text.
    """
    fact_body = (
        "picobot_index_text(NEW.user_id,"
        " COALESCE(NEW.subject || ': ', '') || picobot_open(NEW.text))"
    )
    note_body = "picobot_index_text(NEW.user_id, NEW.key || ': ' || picobot_open(NEW.content))"
    await run_script(conn, _index_triggers(note_body, fact_body))


async def m024_vectors_survive_sealing(conn: AsyncConnection) -> None:
    """A message's vector is dropped when its text changes, not when it is sealed.

    ``picobot migrate`` seals texts stored before per-user keys in place: the stored
    value changes, the text does not, and the vector still holds.
    """
    await run_script(
        conn,
        """
        DROP TRIGGER message_vectors_edited;
        CREATE TRIGGER message_vectors_edited AFTER UPDATE OF content ON messages
        WHEN picobot_open(NEW.content) IS NOT picobot_open(OLD.content) BEGIN
            DELETE FROM message_vectors WHERE message_id = OLD.id;
        END;
        """,
    )


async def m025_sealed_names(conn: AsyncConnection) -> None:
    """Note names and fact subjects sealed like their texts, found by a keyed tag.

    ``user_memories.key`` and ``facts.subject`` are sealed with their user's key from
    now on (``picobot migrate`` seals the existing ones, picobot.store.keys.backfill);
    a sealed value differs each time, so what a note and a fact are looked up (and a
    note kept unique) by is the name's tag in ``key_tag`` and ``subject_tag``
    (``picobot_tag``: an HMAC under the user's term key; the name itself without a key
    store). Existing rows have no tag yet and are found by their name in clear until
    the backfill tags and seals them. The index triggers read the opened name.
    """
    fact_body = (
        "picobot_index_text(NEW.user_id, COALESCE(picobot_open(NEW.subject) || ': ', '')"
        " || picobot_open(NEW.text))"
    )
    note_body = (
        "picobot_index_text(NEW.user_id, picobot_open(NEW.key) || ': '"
        " || picobot_open(NEW.content))"
    )
    await run_script(
        conn,
        """
        ALTER TABLE user_memories ADD COLUMN key_tag;
        CREATE UNIQUE INDEX user_memories_by_tag ON user_memories(user_id, key_tag);
        ALTER TABLE facts ADD COLUMN subject_tag;
        CREATE INDEX facts_by_tag ON facts(user_id, category, subject_tag);
        """,
    )
    await run_script(conn, _index_triggers(note_body, fact_body))
