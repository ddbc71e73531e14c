"""Paged listings of the store: sessions by offset, a session's messages by sequence."""

from __future__ import annotations

from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database


async def test_session_pages_cover_every_session_once_even_on_equal_activity(
    db: Database,
) -> None:
    repo = SessionRepo(db)
    ids = {await repo.create("ws", f"chat{i}", "ws:alice") for i in range(5)}
    await repo.create("ws", "other", "ws:bob")
    # Equal last_active everywhere: only the id tie-break keeps pages disjoint.
    await db.execute_write("UPDATE sessions SET last_active = 1000")
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = await repo.page("ws:alice", limit=2, offset=offset)
        assert len(page.sessions) <= 2
        seen.extend(s.id for s in page.sessions)
        offset = page.next_offset
    assert sorted(seen) == sorted(ids)
    everyone = await repo.page(None, limit=10)
    assert len(everyone.sessions) == 6 and everyone.next_offset is None


async def test_message_pages_walk_back_from_the_newest(db: Database) -> None:
    sid = await SessionRepo(db).create("ws", "chat", "ws:alice")
    messages = MessageRepo(db)
    for n in range(1, 6):
        await messages.append(sid, "user", f"m{n}", 1)
    newest = await messages.page_before(sid, limit=2)
    assert [m.content for m in newest.messages] == ["m4", "m5"]
    assert newest.next_before_seq == 4
    middle = await messages.page_before(sid, limit=2, before_seq=4)
    assert [m.seq_order for m in middle.messages] == [2, 3] and middle.next_before_seq == 2
    first = await messages.page_before(sid, limit=2, before_seq=2)
    assert [m.seq_order for m in first.messages] == [1] and first.next_before_seq is None
    exact = await messages.page_before(sid, limit=5)
    assert len(exact.messages) == 5 and exact.next_before_seq is None
    assert (await messages.page_before("nope", limit=5)).messages == []
