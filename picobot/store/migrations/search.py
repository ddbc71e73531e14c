"""The migrations of the recall index (``search_index``); see picobot.store.retrieval.search."""

from __future__ import annotations

from picobot.store.connection import AsyncConnection
from picobot.store.migrations.script import run_script
from picobot.store.retrieval.terms import UNSPACED_GLOB


async def m002_search_index(conn: AsyncConnection) -> None:
    """Full-text recall index over user/assistant messages and user memories.

    A regular FTS5 table (it keeps its own copy of the text) kept in sync by triggers
    in the writing transaction. rowid = messages.id for a message, -user_memories.id
    for a memory, so a delete is one rowid lookup and a hit maps back without a join.
    ``owner`` holds the user token every query filters on, computed with core SQL as
    'u' || lower(hex(user_id)) || 'x' so the triggers work on any connection (a
    registered sha256 function would make writes from other connections fail). No
    Porter suffix ends in 'x', so the stemmer never alters a token, and hex is
    injective, so two users never share one. See picobot.store.retrieval.search.
    """
    await run_script(
        conn,
        """
        CREATE VIRTUAL TABLE search_index USING fts5(
            owner,
            body,
            session_id UNINDEXED,
            seq_order UNINDEXED,
            created_at UNINDEXED,
            tokenize = 'porter unicode61 remove_diacritics 2'
        );
        -- The owner column only narrows; weight 0 keeps it out of the score.
        INSERT INTO search_index (search_index, rank) VALUES ('rank', 'bm25(0.0, 1.0)');

        -- Tool and system messages are not indexed: tool output includes earlier
        -- recall results and would echo them back.
        CREATE TRIGGER search_messages_ai AFTER INSERT ON messages
        WHEN NEW.role IN ('user', 'assistant') BEGIN
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            SELECT NEW.id, 'u' || lower(hex(user_id)) || 'x', NEW.content, NEW.session_id,
                   NEW.seq_order, NEW.created_at
            FROM sessions WHERE id = NEW.session_id;
        END;
        CREATE TRIGGER search_messages_ad AFTER DELETE ON messages BEGIN
            DELETE FROM search_index WHERE rowid = OLD.id;
        END;
        CREATE TRIGGER search_messages_au AFTER UPDATE ON messages BEGIN
            DELETE FROM search_index WHERE rowid = OLD.id;
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            SELECT NEW.id, 'u' || lower(hex(user_id)) || 'x', NEW.content, NEW.session_id,
                   NEW.seq_order, NEW.created_at
            FROM sessions WHERE id = NEW.session_id AND NEW.role IN ('user', 'assistant');
        END;

        CREATE TRIGGER search_memories_ai AFTER INSERT ON user_memories BEGIN
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            VALUES (-NEW.id, 'u' || lower(hex(NEW.user_id)) || 'x',
                    NEW.key || ': ' || NEW.content, NULL, NULL, NEW.updated_at);
        END;
        CREATE TRIGGER search_memories_ad AFTER DELETE ON user_memories BEGIN
            DELETE FROM search_index WHERE rowid = -OLD.id;
        END;
        CREATE TRIGGER search_memories_au AFTER UPDATE ON user_memories BEGIN
            DELETE FROM search_index WHERE rowid = -OLD.id;
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            VALUES (-NEW.id, 'u' || lower(hex(NEW.user_id)) || 'x',
                    NEW.key || ': ' || NEW.content, NULL, NULL, NEW.updated_at);
        END;

        -- A session handed to another user takes its messages' index entries along.
        CREATE TRIGGER search_sessions_au AFTER UPDATE OF user_id ON sessions
        WHEN NEW.user_id IS NOT OLD.user_id BEGIN
            UPDATE search_index SET owner = 'u' || lower(hex(NEW.user_id)) || 'x'
            WHERE rowid IN (SELECT id FROM messages WHERE session_id = NEW.id);
        END;

        -- Backfill what existed before this migration.
        INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
        SELECT m.id, 'u' || lower(hex(s.user_id)) || 'x', m.content, m.session_id,
               m.seq_order, m.created_at
        FROM messages m JOIN sessions s ON s.id = m.session_id
        WHERE m.role IN ('user', 'assistant');
        INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
        SELECT -id, 'u' || lower(hex(user_id)) || 'x', key || ': ' || content, NULL, NULL,
               updated_at
        FROM user_memories;
        """,
    )


async def m005_user_terms(conn: AsyncConnection) -> None:
    """Rebuild the recall index with per-user terms (see picobot.store.retrieval.search).

    Same columns and rowids as m002, but ``body`` holds :func:`index_text` of the text:
    each word prefixed by its owner's hash, so a query reads one user's doclists instead
    of every user's. The triggers call the ``picobot_index_text`` function that
    picobot.store.db installs on its connections; deletes still need none. The ranking
    moves into the query (explicit bm25), so the 'rank' setting is gone. The rebuild
    reads every message once (about 50 s per million messages on a 2-core machine).
    """
    await run_script(
        conn,
        """
        DROP TRIGGER IF EXISTS search_messages_ai;
        DROP TRIGGER IF EXISTS search_messages_ad;
        DROP TRIGGER IF EXISTS search_messages_au;
        DROP TRIGGER IF EXISTS search_memories_ai;
        DROP TRIGGER IF EXISTS search_memories_ad;
        DROP TRIGGER IF EXISTS search_memories_au;
        DROP TRIGGER IF EXISTS search_sessions_au;
        DROP TABLE IF EXISTS search_index;

        CREATE VIRTUAL TABLE search_index USING fts5(
            owner,
            body,
            session_id UNINDEXED,
            seq_order UNINDEXED,
            created_at UNINDEXED,
            tokenize = 'porter unicode61 remove_diacritics 2'
        );

        CREATE TRIGGER search_messages_ai AFTER INSERT ON messages
        WHEN NEW.role IN ('user', 'assistant') BEGIN
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            SELECT NEW.id, 'u' || lower(hex(user_id)) || 'x',
                   picobot_index_text(user_id, NEW.content), NEW.session_id,
                   NEW.seq_order, NEW.created_at
            FROM sessions WHERE id = NEW.session_id;
        END;
        CREATE TRIGGER search_messages_ad AFTER DELETE ON messages BEGIN
            DELETE FROM search_index WHERE rowid = OLD.id;
        END;
        CREATE TRIGGER search_messages_au AFTER UPDATE ON messages BEGIN
            DELETE FROM search_index WHERE rowid = OLD.id;
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            SELECT NEW.id, 'u' || lower(hex(user_id)) || 'x',
                   picobot_index_text(user_id, NEW.content), NEW.session_id,
                   NEW.seq_order, NEW.created_at
            FROM sessions WHERE id = NEW.session_id AND NEW.role IN ('user', 'assistant');
        END;

        CREATE TRIGGER search_memories_ai AFTER INSERT ON user_memories BEGIN
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            VALUES (-NEW.id, 'u' || lower(hex(NEW.user_id)) || 'x',
                    picobot_index_text(NEW.user_id, NEW.key || ': ' || NEW.content),
                    NULL, NULL, NEW.updated_at);
        END;
        CREATE TRIGGER search_memories_ad AFTER DELETE ON user_memories BEGIN
            DELETE FROM search_index WHERE rowid = -OLD.id;
        END;
        CREATE TRIGGER search_memories_au AFTER UPDATE ON user_memories BEGIN
            DELETE FROM search_index WHERE rowid = -OLD.id;
            INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
            VALUES (-NEW.id, 'u' || lower(hex(NEW.user_id)) || 'x',
                    picobot_index_text(NEW.user_id, NEW.key || ': ' || NEW.content),
                    NULL, NULL, NEW.updated_at);
        END;

        -- A session handed to another user takes its messages' index entries along,
        -- re-prefixed for the new owner.
        CREATE TRIGGER search_sessions_au AFTER UPDATE OF user_id ON sessions
        WHEN NEW.user_id IS NOT OLD.user_id BEGIN
            UPDATE search_index SET owner = 'u' || lower(hex(NEW.user_id)) || 'x',
                body = picobot_index_text(NEW.user_id,
                    (SELECT content FROM messages WHERE id = search_index.rowid))
            WHERE rowid IN (SELECT id FROM messages WHERE session_id = NEW.id);
        END;

        INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
        SELECT m.id, 'u' || lower(hex(s.user_id)) || 'x',
               picobot_index_text(s.user_id, m.content), m.session_id, m.seq_order,
               m.created_at
        FROM messages m JOIN sessions s ON s.id = m.session_id
        WHERE m.role IN ('user', 'assistant');
        INSERT INTO search_index (rowid, owner, body, session_id, seq_order, created_at)
        SELECT -id, 'u' || lower(hex(user_id)) || 'x',
               picobot_index_text(user_id, key || ': ' || content), NULL, NULL, updated_at
        FROM user_memories;
        """,
    )


async def m006_deferred_message_index(conn: AsyncConnection) -> None:
    """Index messages in batches: a new message is queued in ``search_pending``.

    Each transaction that writes the index adds an FTS5 segment and pays its merge
    work, and every recall query reads each query term in every segment: one index
    write per batch instead of one per commit keeps about half as many segments.
    :func:`picobot.store.retrieval.search_writes.index_pending` indexes the queue in one
    transaction (the runtime runs it every ``INDEX_INTERVAL_SECS``; explicit searches
    run it first). Deletes and memories stay immediate.
    """
    await run_script(
        conn,
        """
        CREATE TABLE search_pending (id INTEGER PRIMARY KEY);

        DROP TRIGGER search_messages_ai;
        DROP TRIGGER search_messages_ad;
        DROP TRIGGER search_messages_au;
        CREATE TRIGGER search_messages_ai AFTER INSERT ON messages
        WHEN NEW.role IN ('user', 'assistant') BEGIN
            INSERT INTO search_pending (id) VALUES (NEW.id);
        END;
        CREATE TRIGGER search_messages_ad AFTER DELETE ON messages BEGIN
            DELETE FROM search_index WHERE rowid = OLD.id;
            DELETE FROM search_pending WHERE id = OLD.id;
        END;
        CREATE TRIGGER search_messages_au AFTER UPDATE ON messages BEGIN
            DELETE FROM search_index WHERE rowid = OLD.id;
            DELETE FROM search_pending WHERE id = OLD.id;
            INSERT OR IGNORE INTO search_pending (id)
            SELECT NEW.id WHERE NEW.role IN ('user', 'assistant');
        END;
        """,
    )


async def m009_search_tidy_steps(conn: AsyncConnection) -> None:
    """Turn FTS5's automerge off: the runtime merges in steps of their own instead.

    Automerge does merge work inside every transaction that adds an index segment, so
    under load the indexer's write holds the writer, and every turn's write behind it,
    for tens of milliseconds. :meth:`picobot.store.retrieval.search.SearchIndex.tidy` does that
    work after each indexing run, in steps of a few milliseconds, each its own write.
    Other processes' index writes (a CLI import) merge nothing meanwhile; FTS5's crisis
    merge still caps a level at 16 segments, and the server's next run tidies.
    """
    await conn.execute("INSERT INTO search_index (search_index, rank) VALUES ('automerge', 0)")


async def m011_split_unspaced_scripts(conn: AsyncConnection) -> None:
    """Index text in unspaced scripts (Chinese, Japanese, Korean, Thai) per character.

    A run of such characters was one indexed word, so no part of it could be found
    (see :func:`picobot.store.retrieval.terms.words`). The messages and memories that hold one
    are indexed again: messages through the queue, memories at once.
    """
    await conn.execute(
        "DELETE FROM search_index WHERE rowid IN (SELECT id FROM messages WHERE content GLOB ?)",
        (UNSPACED_GLOB,),
    )
    await conn.execute(
        "INSERT OR IGNORE INTO search_pending (id) SELECT id FROM messages"
        " WHERE content GLOB ? AND role IN ('user', 'assistant')",
        (UNSPACED_GLOB,),
    )
    # The update trigger indexes a memory again with the current terms.
    await conn.execute(
        "UPDATE user_memories SET content = content WHERE content GLOB ?", (UNSPACED_GLOB,)
    )
