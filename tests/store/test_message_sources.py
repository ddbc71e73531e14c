"""Messages a channel may hand over twice are stored once (m007_message_sources)."""

from __future__ import annotations

from pathlib import Path

from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.migrations import MIGRATIONS, apply_migrations
from tests.store.search.test_search import old_message, old_session


async def contents(db: Database) -> list[tuple[str, int, str]]:
    rows = await db.fetchall(
        "SELECT session_id, seq_order, picobot_open(content) AS content FROM messages ORDER BY id"
    )
    return [(str(r[0]), int(r[1]), str(r[2])) for r in rows]


async def test_a_message_handed_over_again_comes_back_with_its_reply(db: Database) -> None:
    repo = MessageRepo(db)
    sid = await SessionRepo(db).create("generic", "c1", "generic:alice")
    first = await repo.append(sid, "user", "hello", 2, source_id="generic:m1")
    assert await repo.following(first) is None
    again = await repo.append(sid, "user", "hello", 2, source_id="generic:m1")
    assert again == first and await repo.following(again) is None  # stored once
    reply = await repo.append(sid, "assistant", "hi!", 1)
    again = await repo.append(sid, "user", "hello", 2, source_id="generic:m1")
    assert again == first and await repo.following(again) == reply
    assert await contents(db) == [(sid, 1, "hello"), (sid, 2, "hi!")]


async def test_a_source_id_is_only_the_same_message_in_its_session_with_its_text(
    db: Database,
) -> None:
    repo = MessageRepo(db)
    sid = await SessionRepo(db).create("generic", "c1", "generic:alice")
    other = await SessionRepo(db).create("generic", "c1", "generic:bob")
    await repo.append(sid, "user", "hello", 2, source_id="generic:m1")
    await repo.append(sid, "assistant", "alice's reply", 2)
    # Bob's message with the same platform id is his own message, never Alice's reply.
    bobs = await repo.append(other, "user", "hello", 2, source_id="generic:m1")
    assert bobs.session_id == other and await repo.following(bobs) is None
    # Another text under a reused id is a new message (stored without the id).
    new = await repo.append(sid, "user", "other text", 2, source_id="generic:m1")
    assert new.seq_order == 3 and await repo.following(new) is None
    assert await contents(db) == [
        (sid, 1, "hello"),
        (sid, 2, "alice's reply"),
        (other, 1, "hello"),
        (sid, 3, "other text"),
    ]
    rows = await db.fetchall(
        "SELECT source_id, picobot_open(content) AS content FROM messages ORDER BY id"
    )
    assert [r[0] for r in rows if r[1] == "other text"] == [None]


async def test_m007_adds_the_column_to_a_database_with_messages(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "c.db", migrate=False)
    try:
        assert await apply_migrations(db, MIGRATIONS[:6])
        sid = await old_session(db, "generic:alice")
        await old_message(db, sid, "user", "from before")
        assert await apply_migrations(db, MIGRATIONS[:7]) == ["m007_message_sources"]
        await apply_migrations(db)  # the repository writes the later tables too (events)
        repo = MessageRepo(db)
        new = await repo.append(sid, "user", "after", 1, source_id="generic:m2")
        assert new.seq_order == 2
        assert await contents(db) == [(sid, 1, "from before"), (sid, 2, "after")]
        check = await db.fetchone("PRAGMA integrity_check")
        assert check is not None and check[0] == "ok"
    finally:
        await db.close()
