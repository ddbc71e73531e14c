"""Purges on PostgreSQL leave no row behind that names what they purged.

A SQLite data directory is checked byte by byte (tests/privacy/test_erasure.py); on
PostgreSQL the server's files are not the store's, so the check is on rows: after a
user purge no row of any of the store's tables (``search_terms``, which SQLite does not
have, included) may name the user, their FTS owner token or one of their sessions.
The recall index is filled here as the background indexer fills it (one
``search_index`` row with its ``search_terms`` per queued message).
"""

from __future__ import annotations

import pytest

from picobot.privacy.controller import PrivacyController
from picobot.privacy.scopes import Actor, UserScope
from picobot.store.conversation.preferences import PreferenceStore
from picobot.store.db import Database
from picobot.store.erasure.erase import erase_residue
from picobot.store.erasure.message_purge import MessagePurge
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.retrieval.search import user_token
from tests.pg.rows import rows_holding
from tests.privacy.test_purge_store import (
    T0,
    add_memory,
    add_message,
    add_session,
    add_summary,
    add_tool,
)

ALICE = "test:alice-7d41c0a9"
BOB = "test:bob-52e8f3b6"


@pytest.fixture
def pg(db: Database) -> Database:
    """``db`` when it is on PostgreSQL (PICOBOT_TEST_STORE=postgresql)."""
    if db.engine.name != "postgresql":
        pytest.skip("PostgreSQL only: run with PICOBOT_TEST_STORE=postgresql")
    return db


async def index_queued(db: Database) -> int:
    """Index every queued message as the background indexer does: a ``search_index``
    row owned by its user's token, and one ``search_terms`` row per term; how many."""
    rows = await db.fetchall(
        "SELECT m.id, m.session_id, m.seq_order, m.created_at, s.user_id FROM messages m"
        " JOIN sessions s ON s.id = m.session_id"
        " WHERE m.id IN (SELECT id FROM search_pending) ORDER BY m.id"
    )
    async with db.transaction() as conn:
        for message_id, session_id, seq_order, created_at, user_id in rows:
            owner = user_token(str(user_id))
            await conn.execute("DELETE FROM search_pending WHERE id = ?", (message_id,))
            await conn.execute(
                "INSERT INTO search_index (rowid, owner, body, session_id, seq_order,"
                " created_at, length) VALUES (?, ?, 'k1 k2', ?, ?, ?, 2)",
                (message_id, owner, session_id, seq_order, created_at),
            )
            for term in ("k1", "k2"):
                await conn.execute(
                    "INSERT INTO search_terms (owner, term, doc, tf) VALUES (?, ?, ?, 1)",
                    (owner, term, message_id),
                )
    return len(rows)


async def fill(db: Database, user_id: str, sessions: list[str]) -> None:
    """Sessions with messages, a summary and a tool record; a memory, a learned fact
    and the privacy switches of ``user_id``; the messages indexed."""
    for sid in sessions:
        await add_session(db, user_id, sid)
        for i in range(4):
            await add_message(
                db, sid, f"{sid} says {i}", role="user" if i % 2 == 0 else "assistant"
            )
        await add_summary(db, sid, f"summary of {sid}", 2)
        await add_tool(db, sid, user_id, f"looked up {sid}")
    await add_memory(db, user_id, "colour", "blue")
    await FactStore(db).observe(
        user_id,
        [Observation(None, "preference", "likes tea", False)],
        session_id=sessions[0],
        message_id=None,
        now=T0,
    )
    await PreferenceStore(db).set(user_id, "recall", False, T0)
    assert await index_queued(db) == 4 * len(sessions)


async def terms_of(db: Database, user_id: str) -> int:
    row = await db.fetchone(
        "SELECT COUNT(*) FROM search_terms WHERE owner = ?", (user_token(user_id),)
    )
    assert row is not None
    return int(row[0])


async def test_a_user_purge_leaves_no_row_naming_the_user_or_their_sessions(
    pg: Database,
) -> None:
    alice_sessions = ["alice-s1-e0b5", "alice-s2-91fa"]
    await fill(pg, ALICE, alice_sessions)
    await fill(pg, BOB, ["bob-s1-3c77"])
    names = [ALICE, user_token(ALICE), *alice_sessions]
    assert set(await rows_holding(pg, names)) == set(names)  # sanity: the scan finds them
    assert await terms_of(pg, ALICE) == 16

    operator = Actor("cli:ops", operator=True)
    controller = PrivacyController(pg, batch_size=3)
    pending = await controller.request(UserScope(ALICE), operator)
    assert pending.plan.counts.index_entries >= 8  # the 8 indexed messages, at least
    result = await controller.confirm(pending.token, operator, "y")
    assert result is not None and result.counts.sessions == 2

    assert await rows_holding(pg, names) == {}
    assert await terms_of(pg, ALICE) == 0
    assert await terms_of(pg, BOB) == 8  # Bob's index is untouched
    assert set(await rows_holding(pg, [BOB, "bob-s1-3c77"])) == {BOB, "bob-s1-3c77"}


async def test_a_message_purge_takes_the_terms_of_its_messages(pg: Database) -> None:
    await fill(pg, ALICE, ["alice-s1-e0b5"])
    row = await pg.fetchone("SELECT MAX(id) FROM messages")
    assert row is not None
    last = int(row[0])
    counts = await MessagePurge(pg).delete("alice-s1-e0b5", [last])
    assert counts.messages == 1 and counts.index_entries == 1
    assert await pg.fetchall("SELECT term FROM search_terms WHERE doc = ?", (last,)) == []
    assert await terms_of(pg, ALICE) == 6


async def test_erasure_after_a_purge_rewrites_only_the_key_store(pg: Database) -> None:
    timings: dict[str, float] = {}
    await erase_residue(pg, timings=timings)
    assert set(timings) == {"keys_compact_s"}  # no FTS merge, VACUUM or WAL checkpoint
