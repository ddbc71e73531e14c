"""The cascade of undo, rewind and delete-one-message, and its verified erasure.

A purge of chosen messages takes their search-index entries and vectors, the tool
records of their turns, the summary if it covered them, the facts learned only from
them (a fact with another source keeps it), and the session's reflections; then no
byte of the removed text is left in the database file or its WAL.
"""

from __future__ import annotations

import random

import pytest

from picobot.privacy.controller import PrivacyController
from picobot.privacy.message_scope import MessagesScope, message_scope, rewind_scope, undo_scope
from picobot.privacy.scopes import Actor
from picobot.store.db import Database
from picobot.store.erasure.message_purge import MessagePurge
from picobot.store.learned.digests import DigestStore, Provenance
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.retrieval.search import SearchIndex
from picobot.store.retrieval.vectors import store_vectors
from tests.privacy.test_erasure import assert_gone, new_marker
from tests.privacy.test_purge_store import (
    T0,
    add_message,
    add_session,
    add_summary,
    add_tool,
)

USER = "test:alice"


class Chat:
    """A session of two exchanges: the first kept, the second removed (its markers in
    ``gone``), with derived rows of both."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.gone: list[str] = []
        self.kept: list[str] = []
        self.ids: dict[str, int] = {}

    def mark(self, gone: bool) -> str:
        marker = new_marker(self.rng)
        (self.gone if gone else self.kept).append(marker)
        return marker

    async def fill(self, db: Database, sid: str = "s1", *, summary_seq: int = 4) -> None:
        await add_session(db, USER, sid, at=T0)
        for name, role, at, gone in (
            ("u1", "user", T0, False),
            ("a1", "assistant", T0, False),
            ("u2", "user", T0 + 10, True),
            ("a2", "assistant", T0 + 10, True),
        ):
            await add_message(db, sid, f"said {self.mark(gone)} here", at=at, role=role)
            row = await db.fetchone("SELECT MAX(id) FROM messages")
            assert row is not None
            self.ids[name] = int(row[0])
        blobs = [(i, (self.mark(n.endswith("2")).encode() * 20)[:768]) for n, i in self.ids.items()]
        assert await db.write(lambda c: store_vectors(c, "all-MiniLM-L6-v2", blobs)) == 4
        # Tool records of each turn.
        await add_tool(db, sid, USER, self.mark(False), at=T0 + 5)
        await add_tool(db, sid, USER, self.mark(True), at=T0 + 11)
        await add_summary(db, sid, f"summary {self.mark(summary_seq >= 3)}", summary_seq, at=T0)
        facts = FactStore(db)
        # Learned only from the removed message: it goes.
        only = Observation(self.mark(True), "preference", f"likes {self.mark(True)}")
        await facts.observe(USER, [only], session_id=sid, message_id=self.ids["u2"], now=T0)
        # Learned from both: it stays, losing the removed source.
        both = Observation(self.mark(False), "preference", f"likes {self.mark(False)}")
        for m in ("u1", "u2"):
            await facts.observe(USER, [both], session_id=sid, message_id=self.ids[m], now=T0)
        # The session's reflection is rebuilt from what remains, as a session purge does.
        source = Provenance(sid, 1, 4, self.ids["u1"], self.ids["a2"])
        await DigestStore(db).add_reflection(USER, source, f"refl {self.mark(True)}", 5, now=T0)
        await SearchIndex(db).index_pending()


async def scalar(db: Database, sql: str) -> int:
    row = await db.fetchone(sql)
    assert row is not None
    return int(row[0])


async def purge(db: Database, scope: MessagesScope) -> None:
    controller = PrivacyController(db)
    pending = await controller.request(scope, Actor(USER))
    result = await controller.confirm(pending.token, Actor(USER), "y")
    assert result is not None and result.counts == pending.plan.counts


@pytest.fixture
def rng() -> random.Random:
    return random.Random(20261128)


async def test_undo_takes_everything_derived_and_leaves_no_byte(
    db: Database, rng: random.Random
) -> None:
    chat = Chat(rng)
    await chat.fill(db)
    scope = await undo_scope(db, "s1")
    assert scope.ids == (chat.ids["u2"], chat.ids["a2"])
    counts = (await PrivacyController(db).plan(scope, Actor(USER))).counts
    assert (counts.messages, counts.tool_records, counts.summaries) == (2, 1, 1)
    assert (counts.facts, counts.digests) == (1, 1)
    await purge(db, scope)
    assert await scalar(db, "SELECT COUNT(*) FROM messages") == 2
    assert await scalar(db, "SELECT COUNT(*) FROM message_vectors") == 2
    assert await scalar(db, "SELECT COUNT(*) FROM tool_records") == 1
    assert await scalar(db, "SELECT COUNT(*) FROM session_summaries") == 0
    assert await scalar(db, "SELECT COUNT(*) FROM facts") == 1
    sources = await db.fetchall("SELECT message_id FROM fact_sources")
    assert [int(r[0]) for r in sources] == [chat.ids["u1"]]
    await assert_gone(db, chat.gone, chat.kept)


async def test_delete_one_message_leaves_no_byte_of_it(db: Database, rng: random.Random) -> None:
    chat = Chat(rng)
    await chat.fill(db, summary_seq=2)
    scope = await message_scope(db, chat.ids["u2"], own=True)
    await purge(db, scope)
    left = await db.fetchall("SELECT id FROM messages ORDER BY id")
    assert [int(r[0]) for r in left] == [chat.ids["u1"], chat.ids["a1"], chat.ids["a2"]]
    # A summary of what came before stays.
    assert await scalar(db, "SELECT COUNT(*) FROM session_summaries") == 1
    # The reply, its vector and one marker of its vector blob stay: not removed.
    reply = [m for m in chat.gone if m in (await _texts_of(db, chat.ids["a2"]))]
    gone = [m for m in chat.gone if m not in reply]
    still = await db.fetchall("SELECT vector FROM message_vectors")
    held = b"".join(bytes(r[0]) for r in still)
    gone = [m for m in gone if m[-20:].encode() not in held]
    await assert_gone(db, gone, [*chat.kept, *reply])


async def _texts_of(db: Database, message_id: int) -> str:
    row = await db.fetchone(
        "SELECT picobot_open(content) AS content FROM messages WHERE id = ?", (message_id,)
    )
    assert row is not None
    return str(row[0])


async def test_rewind_counts_exactly_what_it_deletes_and_others_are_untouched(
    db: Database, rng: random.Random
) -> None:
    chat = Chat(rng)
    await chat.fill(db)
    other = Chat(rng)
    await other.fill(db, "s2")
    scope = await rewind_scope(db, chat.ids["a1"])
    await purge(db, scope)
    assert await scalar(db, "SELECT COUNT(*) FROM messages WHERE session_id = 's2'") == 4
    assert await scalar(db, "SELECT COUNT(*) FROM messages WHERE session_id = 's1'") == 2
    # Search finds the other session's words still; none of the removed ones.
    index = SearchIndex(db)
    assert await index.search(USER, [other.gone[0]])
    assert not await index.search(USER, [chat.gone[0]])


async def test_a_user_cannot_plan_messages_of_another(db: Database, rng: random.Random) -> None:
    chat = Chat(rng)
    await chat.fill(db)
    scope = await undo_scope(db, "s1")
    with pytest.raises(Exception, match="no such message of yours"):
        await PrivacyController(db).plan(scope, Actor("test:bob"))


async def extracted_up_to(db: Database, seq: int) -> None:
    """Fact extraction has read session s1 up to message number ``seq``."""
    await db.write(
        lambda c: c.execute(
            "INSERT INTO fact_progress (session_id, covered_seq, updated_at) VALUES ('s1', ?, 0)",
            (seq,),
        )
    )


async def test_fact_extraction_reads_the_messages_written_after_an_undo(
    db: Database, rng: random.Random
) -> None:
    await Chat(rng).fill(db)
    await extracted_up_to(db, 4)
    await purge(db, await undo_scope(db, "s1"))
    # The next message takes sequence number 3 again: extraction has not read it.
    assert await add_message(db, "s1", "new words") == 3
    assert await scalar(db, "SELECT covered_seq FROM fact_progress") == 2


async def test_removing_the_oldest_messages_leaves_the_extraction_cursor(
    db: Database, rng: random.Random
) -> None:
    chat = Chat(rng)
    await chat.fill(db)
    await extracted_up_to(db, 3)
    # What a message cap removes: the first exchange. Messages 3 and 4 were read already.
    await MessagePurge(db).delete("s1", [chat.ids["u1"], chat.ids["a1"]])
    assert await scalar(db, "SELECT covered_seq FROM fact_progress") == 3
    assert await add_message(db, "s1", "new words") == 5
