"""The SQLite store: pragmas, migrations, ordering, and clear errors on bad databases."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import pytest

from picobot.errors import StoreUnavailable
from picobot.store.connect import install_functions
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.migrations import MIGRATIONS, applied_versions, apply_migrations


@pytest.mark.sqlite_only
async def test_open_creates_file_in_wal_mode_with_foreign_keys(db: Database) -> None:
    assert db.path.is_file()
    mode = await db.fetchone("PRAGMA journal_mode")
    fk = await db.fetchone("PRAGMA foreign_keys")
    assert mode is not None and mode[0] == "wal"
    assert fk is not None and fk[0] == 1


async def test_migrations_are_recorded_and_not_rerun(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    db = await Database.open(path)
    versions = await applied_versions(db)
    assert versions == [(i + 1, m.__name__) for i, m in enumerate(MIGRATIONS)]
    assert await apply_migrations(db) == []
    await db.close()
    await db.close()  # closing twice is harmless
    again = await Database.open(path)
    try:
        assert await applied_versions(again) == versions
    finally:
        await again.close()


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    db = await Database.open(path)
    async with db.transaction() as conn:
        await conn.execute(
            "INSERT INTO _migrations (version, name, applied_at) VALUES (99, 'future', 0)"
        )
    await db.close()
    with pytest.raises(StoreUnavailable, match="newer than this PicoBot"):
        await Database.open(path)


async def test_tables_and_indexes_exist(db: Database) -> None:
    last_messages = "SELECT * FROM messages WHERE session_id = ? ORDER BY seq_order DESC LIMIT 20"
    if db.engine.name == "postgresql":
        listed = (
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() UNION"
            " SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
        )
        explain, used = "EXPLAIN ", "Index"
    else:
        listed = "SELECT name FROM sqlite_master WHERE type IN ('table', 'index')"
        explain, used = "EXPLAIN QUERY PLAN ", "USING INDEX"
    names = {r[0] for r in await db.fetchall(listed)}
    for table in ("sessions", "messages", "user_memories", "session_summaries", "tool_records"):
        assert table in names
    assert "sessions_by_user" in names
    # "last N messages of a session" is served by the UNIQUE(session_id, seq_order) index.
    plan = await db.fetchall(explain + last_messages, ("x",))
    assert any(used in str(r[-1]) for r in plan)


def integrity_error(db: Database) -> type[Exception]:
    """The exception a violated constraint raises on ``db``'s engine."""
    if db.engine.name == "postgresql":
        import psycopg

        return psycopg.IntegrityError
    return sqlite3.IntegrityError


async def test_messages_are_ordered_per_session(db: Database) -> None:
    sessions = SessionRepo(db)
    messages = MessageRepo(db)
    a = await sessions.create("tui", "local", "tui:local")
    b = await sessions.create("tui", "other", "tui:local")
    for i in range(3):
        await messages.append(a, "user", f"a{i}", 1)
        await messages.append(b, "user", f"b{i}", 1)
    last_a = await messages.last(a, 10)
    assert [m.content for m in last_a] == ["a0", "a1", "a2"]
    assert [m.seq_order for m in last_a] == [1, 2, 3]
    assert [m.content for m in await messages.last(b, 2)] == ["b1", "b2"]
    with pytest.raises(integrity_error(db)):
        async with db.transaction() as conn:
            await conn.execute(
                "INSERT INTO messages (session_id, seq_order, role, content, token_estimate,"
                " created_at) VALUES (?, 1, 'user', 'dup', 1, 0)",
                (a,),
            )
    assert await messages.count(a) == 3


async def test_fork_copies_transcript_and_records_parent(db: Database) -> None:
    sessions = SessionRepo(db)
    messages = MessageRepo(db)
    parent = await sessions.create("tui", "local", "tui:local")
    await messages.append(parent, "user", "hello", 2)
    await messages.append(parent, "assistant", "hi", 1)
    child = await sessions.create("tui", "local", "tui:local", parent_session_id=parent)
    info = await sessions.get(child)
    assert info is not None and info.parent_session_id == parent
    assert [m.content for m in await messages.last(child, 10)] == ["hello", "hi"]
    assert await sessions.current("tui", "local", "tui:local") == child
    await messages.append(child, "user", "only in the fork", 3)
    assert await messages.count(parent) == 2


async def test_locked_database_gives_clear_error_and_recovers(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    db = await Database.open(path, busy_timeout_ms=100)
    sessions = SessionRepo(db)
    sid = await sessions.create("tui", "local", "tui:local")
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreUnavailable, match="locked by another process"):
            await MessageRepo(db).append(sid, "user", "while locked", 1)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    stored = await MessageRepo(db).append(sid, "user", "after the lock", 1)
    assert stored.seq_order == 1
    await db.close()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
async def test_read_only_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(StoreUnavailable):
            await Database.open(ro / "conversations.db")
    finally:
        ro.chmod(0o700)


async def test_read_only_database_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    db = await Database.open(path)
    sid = await SessionRepo(db).create("tui", "local", "tui:local")
    await MessageRepo(db).append(sid, "user", "kept", 1)
    await db.close()
    # A read-only open (as a read-only mount would force) must refuse writes clearly
    # and keep what is stored.
    uri = f"file:{path}?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    install_functions(conn)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("INSERT INTO _migrations VALUES (50, 'x', 0)")
        assert conn.execute("SELECT picobot_open(content) FROM messages").fetchall() == [("kept",)]
    finally:
        conn.close()


async def test_garbage_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreUnavailable, match="damaged or not a PicoBot database"):
        await Database.open(path)


async def test_another_applications_database_is_refused_and_left_untouched(
    tmp_path: Path,
) -> None:
    path = tmp_path / "conversations.db"
    with contextlib.closing(sqlite3.connect(path)) as other:
        other.execute("CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT)")
        other.execute("INSERT INTO moz_places (url) VALUES ('https://example.com')")
        other.commit()
    before = path.read_bytes()
    with pytest.raises(StoreUnavailable, match=r"not a PicoBot database.*moz_places"):
        await Database.open(path)
    # Neither PicoBot's tables nor WAL mode were written into the other file.
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["conversations.db"]


async def test_an_empty_file_is_opened_as_a_new_database(tmp_path: Path) -> None:
    path = tmp_path / "conversations.db"
    path.touch()
    db = await Database.open(path)
    try:
        assert len(await applied_versions(db)) == len(MIGRATIONS)
    finally:
        await db.close()


async def test_cancelled_begin_does_not_poison_the_writer(tmp_path: Path) -> None:
    import asyncio

    db = await Database.open(tmp_path / "c.db")
    sid = await SessionRepo(db).create("tui", "local", "tui:local")

    async def write() -> None:
        async with db.transaction() as conn:
            await conn.execute("SELECT 1")

    for _ in range(20):  # cancel at various points of BEGIN / body
        task = asyncio.create_task(write())
        await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    stored = await MessageRepo(db).append(sid, "user", "still writable", 1)
    assert stored.seq_order == 1
    await db.close()


async def test_writes_do_not_checkpoint_but_the_background_checkpoint_does(
    tmp_path: Path,
) -> None:
    db = await Database.open(tmp_path / "c.db")
    sid = await SessionRepo(db).create("tui", "local", "tui:local")
    for i in range(300):
        await MessageRepo(db).append(sid, "user", f"message {i} " + "x" * 500, 130)
    wal = tmp_path / "c.db-wal"
    # With automatic checkpoints on (1000 pages) the WAL would have been reset already.
    assert wal.stat().st_size > 1000 * 4096
    assert await db.checkpoint_passive() == 0
    with sqlite3.connect(tmp_path / "c.db") as plain:
        plain.execute("PRAGMA wal_checkpoint(PASSIVE)")
        assert plain.execute("SELECT COUNT(*) FROM messages").fetchone() == (300,)
    await db.close()
    assert not wal.exists() or wal.stat().st_size == 0
