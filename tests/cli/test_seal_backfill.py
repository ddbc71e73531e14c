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
from picobot.store.db import Database
from picobot.store.keys.backfill import SEALED_COLUMNS, count_clear, seal_existing
from picobot.store.retrieval.search import SearchIndex
from picobot.store.retrieval.vectors import store_vectors
from tests.privacy.test_erasure import scan

DATA = Path("data")
USER = "tui:alice"
MARKERS = [f"markerclear{n:02d}x" for n in range(6)]
VECTOR = bytes(range(256)) * 3  # 768 bytes: 384 float16s


async def seed_in_clear() -> None:
    """A database written before per-user keys: no key store, texts in clear."""
    db = await Database.open(DATA / "conversations.db")
    try:
        sid = await SessionRepo(db).create("tui", "local", USER)
        for marker in MARKERS[:4]:
            await MessageRepo(db).append(sid, "user", f"said {marker} once", 3)
        await MemoryRepo(db).save(USER, "pet", f"a cat {MARKERS[4]}", max_count=10)
        await SummaryRepo(db).save(sid, f"they said {MARKERS[5]}", 2, 5, 1.0)
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
    assert set(scan(DATA, MARKERS)) == set(MARKERS)  # in clear, before
    assert main(["migrate"]) == 0
    captured = capsys.readouterr()
    assert "sealed 7 rows" in captured.out  # 4 messages, a note, a summary, a vector
    assert "sealing messages.content" in captured.err
    assert scan(DATA, MARKERS) == {}
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
    assert before == 7 and between == before - 2 and after == 0
    assert texts()[:4] == [f"said {m} once" for m in MARKERS[:4]]


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
