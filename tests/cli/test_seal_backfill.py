"""``picobot migrate`` seals what a database stored in clear before per-user keys."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from picobot.cli.main import main
from picobot.config.settings import Settings
from picobot.runtime import open_database
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.conversation.summaries import SummaryRepo
from picobot.store.conversation.tool_records import ToolRecordRepo
from picobot.store.db import Database
from picobot.store.keys.backfill import SEALED_COLUMNS, count_clear, seal_existing
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.learned.facts import find_facts, operator_filter
from picobot.store.retrieval.search import SearchIndex
from picobot.store.retrieval.vectors import store_vectors
from tests.privacy.test_erasure import scan

DATA = Path("data")
USER = "tui:alice"
MARKERS = [f"markerclear{n:02d}x" for n in range(6)]
NOTE, SUBJECT, TOOL = "markernamenotex", "markersubjectx", "markertoolnamex"
"""A note's name, a fact's subject and a made-up tool's name, each a user's words."""
VECTOR = bytes(range(256)) * 3  # 768 bytes: 384 float16s
ROWS = 16
"""What the backfill seals of :func:`seed_in_clear`: 4 messages, a note (text, name,
tag), a summary, a vector, a fact (text, subject, tag, history), a tool record (name,
arguments, result)."""


async def seed_in_clear() -> None:
    """A database written before per-user keys: no key store, texts in clear."""
    db = await Database.open(DATA / "conversations.db")
    try:
        sid = await SessionRepo(db).create("tui", "local", USER)
        for marker in MARKERS[:4]:
            await MessageRepo(db).append(sid, "user", f"said {marker} once", 3)
        await MemoryRepo(db).save(USER, NOTE, f"a cat {MARKERS[4]}", max_count=10)
        await SummaryRepo(db).save(sid, f"they said {MARKERS[5]}", 2, 5, 1.0)
        tea = Observation(SUBJECT, "personal", "drinks tea")
        await FactStore(db).create(USER, tea, confidence=None, actor="cli:test", now=1.0)
        await ToolRecordRepo(db).add(sid, USER, TOOL, "{}", "no such tool", False, 1.0)
        await db.write(lambda conn: store_vectors(conn, "m", [(1, VECTOR)]))
        await db.checkpoint()
    finally:
        await db.close()


def texts() -> list[str]:
    async def read() -> list[str]:
        async with open_database(Settings(data={"dir": str(DATA)})) as db:
            rows = await db.fetchall("SELECT picobot_open(content) FROM messages ORDER BY id")
            notes = await db.fetchall("SELECT picobot_open(content) FROM user_memories")
            summary = await db.fetchall("SELECT picobot_open(summary) FROM session_summaries")
            vector = await db.fetchall("SELECT picobot_open_bytes(vector) FROM message_vectors")
            assert [bytes(r[0]) for r in vector] == [VECTOR]
            await SearchIndex(db).index_pending(None)
            hits = await db.fetchall(
                "SELECT rowid FROM search_index WHERE search_index MATCH picobot_match(?, ?)",
                (USER, f'["{MARKERS[0]}"]'),
            )
            assert hits, "the message is found by its word under the user's key"
        return [str(r[0]) for r in rows + notes + summary]

    return asyncio.run(read())


def test_migrate_seals_old_rows_erases_the_clear_copies_and_keeps_everything(
    capsys: pytest.CaptureFixture[str],
) -> None:
    asyncio.run(seed_in_clear())
    names = [NOTE, SUBJECT, TOOL]
    assert set(scan(DATA, MARKERS + names)) == set(MARKERS + names)  # in clear, before
    assert main(["migrate"]) == 0
    captured = capsys.readouterr()
    assert f"sealed {ROWS} rows" in captured.out
    assert "sealing messages.content" in captured.err
    assert scan(DATA, MARKERS + names) == {}
    said = texts()
    assert [f"said {m} once" for m in MARKERS[:4]] == said[:4]
    assert said[4:] == [f"a cat {MARKERS[4]}", f"they said {MARKERS[5]}"]
    assert main(["migrate", "--json"]) == 0
    assert '"sealed_now": 0' in capsys.readouterr().out  # nothing left to do


def test_an_interrupted_backfill_resumes_where_it_stopped() -> None:
    asyncio.run(seed_in_clear())

    class Killed(Exception):
        pass

    def die_after_first_batch(column: str, rows: int) -> None:
        raise Killed(column)

    async def run() -> tuple[int, int, int]:
        async with open_database(Settings(data={"dir": str(DATA)})) as db:
            before = await count_clear(db)
            with pytest.raises(Killed):
                await seal_existing(db, batch=2, progress=die_after_first_batch)
            between = await count_clear(db)
            await seal_existing(db, batch=2)
            return before, between, await count_clear(db)

    before, between, after = asyncio.run(run())
    assert before == ROWS and between == before - 2 and after == 0
    assert texts()[:4] == [f"said {m} once" for m in MARKERS[:4]]


def test_notes_and_facts_are_found_by_name_at_every_step_of_the_backfill() -> None:
    asyncio.run(seed_in_clear())

    class Killed(Exception):
        pass

    def die_once_tagged(column: str, rows: int) -> None:
        if column == "user_memories.key_tag":
            raise Killed(column)

    async def stored(db: Database) -> tuple[str, ...]:
        row = await db.fetchone("SELECT typeof(key), typeof(key_tag) FROM user_memories")
        assert row is not None
        return tuple(row)

    async def run() -> None:
        async with open_database(Settings(data={"dir": str(DATA)})) as db:
            notes, facts = MemoryRepo(db), FactStore(db)
            assert await stored(db) == ("text", "text")  # without keys the tag is the name
            assert (await notes.get(USER, NOTE)) is not None
            with pytest.raises(Killed):
                await seal_existing(db, progress=die_once_tagged)
            assert await stored(db) == ("text", "blob")  # tagged, the name not sealed yet
            assert (await notes.get(USER, NOTE)) is not None
            await seal_existing(db)
            assert await stored(db) == ("blob", "blob")
            saved = await notes.save(USER, NOTE, "a dog", max_count=10)
            assert saved.key == NOTE and await notes.count(USER) == 1  # updated, not added
            assert await notes.set_sensitive(USER, NOTE, True) is not None
            await notes.set_sensitive(USER, NOTE, False)
            hits = await SearchIndex(db).search(USER, [NOTE])
            assert [h.text for h in hits if h.kind == "memory"] == [f"{NOTE}: a dog"]
            again = Observation(SUBJECT, "personal", "drinks tea")
            applied = await facts.observe(USER, [again], session_id=None, message_id=None, now=2)
            assert [a.outcome for a in applied] == ["reinforced"]
            chosen = await db.read(lambda c: find_facts(c, operator_filter(subject=SUBJECT), 9))
            assert [(f.subject, f.text) for f in chosen] == [(SUBJECT, "drinks tea")]
            assert await notes.delete(USER, NOTE) and await notes.count(USER) == 0

    asyncio.run(run())


def test_every_sealed_column_reads_back_through_the_store() -> None:
    # The list the backfill walks names real columns (a renamed one would be missed).
    asyncio.run(seed_in_clear())
    conn = sqlite3.connect(DATA / "conversations.db")
    try:
        for column in SEALED_COLUMNS:
            names = {r[1] for r in conn.execute(f"PRAGMA table_info({column.table})")}
            assert column.column in names, column
    finally:
        conn.close()


def test_rows_in_clear_and_old_vectors_never_count_as_a_purged_user() -> None:
    from picobot.store.keys.orphans import users_without_keys

    asyncio.run(seed_in_clear())

    async def orphans() -> list[str]:
        async with open_database(Settings(data={"dir": str(DATA)})) as db:
            return await users_without_keys(db)

    assert asyncio.run(orphans()) == []  # texts in clear, a float16 vector: no key needed
    assert main(["migrate"]) == 0
    assert asyncio.run(orphans()) == []  # all sealed under a key the store holds
