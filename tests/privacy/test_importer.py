"""Legacy sessions.json import: one transaction, strict validation, rename, idempotence."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from picobot.config.settings import Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.privacy.export import export_user
from picobot.runtime import open_runtime
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.erasure.legacy_import import import_sessions_json
from picobot.store.retrieval.search import SearchIndex, fts_query

USER = "whatsapp:351900000000@s.whatsapp.net"
SECRET = "TOPSECRET-content"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
async def db(data_dir: Path) -> AsyncIterator[Database]:
    database = await Database.open(data_dir / "conversations.db")
    yield database
    await database.close()


def snapshot() -> dict[str, Any]:
    """A valid snapshot; the fork is listed before its parent on purpose."""
    return {
        "version": 1,
        "sessions": [
            {
                "id": "fork1",
                "user_id": USER,
                "channel": "whatsapp",
                "chat_id": "351900000000",
                "created_at": "2024-05-02T09:00:00Z",
                "parent_session_id": "legacy1",
                "messages": [{"role": "user", "content": "forked question about giraffes"}],
            },
            {
                "id": "legacy1",
                "user_id": USER,
                "channel": "whatsapp",
                "chat_id": "351900000000",
                "created_at": 1714554000,
                "last_active": 1714554100.5,
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {
                        "role": "user",
                        "content": "I keep a zebra named Stripes",
                        "created_at": 1714554001,
                    },
                    {"role": "assistant", "content": "A zebra! " + SECRET},
                    {
                        "role": "tool",
                        "content": "zebra tool output",
                        "created_at": "2024-05-01T09:00:09",
                    },
                ],
            },
        ],
    }


def write(data_dir: Path, doc: Any) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "sessions.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return path


async def rows(db: Database, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in await db.fetchall(sql, params)]


async def table_counts(db: Database) -> dict[str, int]:
    counts = {}
    for table in ("sessions", "messages", "current_sessions", "search_index"):
        row = await db.fetchone(f"SELECT COUNT(*) FROM {table}")  # noqa: S608 - fixed names
        assert row is not None
        counts[table] = int(row[0])
    return counts


async def test_no_file_means_nothing_to_do(db: Database, data_dir: Path) -> None:
    assert await import_sessions_json(db, data_dir) is None
    assert await import_sessions_json(db, data_dir / "missing") is None


async def test_import_writes_sessions_messages_and_index(
    db: Database, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(data_dir, snapshot())
    caplog.set_level(logging.INFO, logger="picobot.store.erasure.legacy_import")
    result = await import_sessions_json(db, data_dir)

    assert result is not None and result.ok
    assert (result.sessions_imported, result.messages_imported, result.skipped) == (2, 5, ())
    assert result.migrated_to == data_dir / "sessions.json.migrated"
    assert not path.exists() and result.migrated_to.is_file()
    assert "imported 2 sessions (5 messages)" in caplog.text

    assert await rows(
        db,
        "SELECT id, parent_session_id, channel, chat_id, user_id, created_at, last_active"
        " FROM sessions ORDER BY created_at",
    ) == [
        ("legacy1", None, "whatsapp", "351900000000", USER, 1714554000.0, 1714554100.5),
        ("fork1", "legacy1", "whatsapp", "351900000000", USER, 1714640400.0, 1714640400.0),
    ]
    messages = await rows(
        db,
        "SELECT seq_order, role, content, token_estimate, created_at FROM messages"
        " WHERE session_id = 'legacy1' ORDER BY seq_order",
    )
    assert [m[:2] for m in messages] == [(1, "system"), (2, "user"), (3, "assistant"), (4, "tool")]
    # ceil(len / 4); a message without a time inherits the one before it.
    assert [m[3] for m in messages] == [2, 7, 7, 5]
    assert [m[4] for m in messages] == [1714554000.0, 1714554001.0, 1714554001.0, 1714554009.0]

    # Inserted through the normal tables, so the FTS triggers indexed user/assistant text.
    hits = await SearchIndex(db).search(USER, ["zebra"])
    assert sorted((h.session_id, h.seq_order) for h in hits) == [("legacy1", 2), ("legacy1", 3)]
    assert [h.session_id for h in await SearchIndex(db).search(USER, ["giraffes"])] == ["fork1"]
    match = await db.fetchone(
        "SELECT count(*) FROM search_index WHERE search_index MATCH ?",
        (fts_query(USER, ["stripes"]),),
    )
    assert match is not None and match[0] == 1
    # The newest imported session becomes the chat's current one.
    assert await SessionRepo(db).current("whatsapp", "351900000000", USER) == "fork1"


async def test_custom_estimator_and_explicit_seq(db: Database, data_dir: Path) -> None:
    doc = snapshot()
    doc["sessions"] = [doc["sessions"][1]]
    msgs = doc["sessions"][0]["messages"]
    for msg, seq in zip(msgs, [30, 10, 40, 20], strict=True):
        msg["seq"] = seq
    write(data_dir, doc)
    result = await import_sessions_json(db, data_dir, estimator=lambda text: 100 + len(text))
    assert result is not None and result.ok
    stored = await rows(
        db, "SELECT seq_order, role, token_estimate FROM messages ORDER BY seq_order"
    )
    # Ordered by the given seq, stored with consecutive seq_order from 1.
    assert stored == [(1, "user", 128), (2, "tool", 117), (3, "system", 108), (4, "assistant", 126)]


async def test_rerun_is_a_no_op_and_existing_sessions_are_skipped(
    db: Database, data_dir: Path
) -> None:
    path = write(data_dir, snapshot())
    first = await import_sessions_json(db, data_dir)
    assert first is not None and first.ok
    before = await table_counts(db)
    assert await import_sessions_json(db, data_dir) is None  # renamed: nothing to import

    # The same snapshot put back: every session already exists, nothing changes, and
    # the earlier .migrated copy is not overwritten.
    write(data_dir, snapshot())
    again = await import_sessions_json(db, data_dir)
    assert again is not None and again.ok
    assert (again.sessions_imported, again.messages_imported) == (0, 0)
    assert sorted(again.skipped) == ["fork1", "legacy1"]
    assert again.migrated_to == data_dir / "sessions.json.migrated.1"
    assert (data_dir / "sessions.json.migrated").is_file()
    assert not path.exists()
    assert await table_counts(db) == before


async def test_a_session_already_in_the_database_is_skipped(db: Database, data_dir: Path) -> None:
    existing = await SessionRepo(db).create("whatsapp", "351900000000", USER)
    doc = snapshot()
    doc["sessions"][0]["id"] = existing  # the fork's id clashes with a stored session
    write(data_dir, doc)
    result = await import_sessions_json(db, data_dir)
    assert result is not None and result.ok
    assert result.skipped == (existing,) and result.sessions_imported == 1
    assert await rows(db, "SELECT COUNT(*) FROM messages WHERE session_id = ?", existing) == [(0,)]
    # The chat already had a current session; the import does not take it over.
    assert await SessionRepo(db).current("whatsapp", "351900000000", USER) == existing


def _mutate(change: str) -> Any:
    doc = snapshot()
    legacy = doc["sessions"][1]
    if change == "bad role":
        legacy["messages"][1]["role"] = "admin"
    elif change == "missing field":
        del legacy["chat_id"]
    elif change == "extra field":
        legacy["messages"][0]["author"] = "x"
    elif change == "duplicate seq":
        for msg, seq in zip(legacy["messages"], [1, 2, 2, 3], strict=True):
            msg["seq"] = seq
    elif change == "duplicate session id":
        doc["sessions"][0].update(id="legacy1", parent_session_id=None)
    elif change == "wrong version":
        doc["version"] = 2
    elif change == "bool time":
        legacy["created_at"] = True
    elif change == "bad time":
        legacy["messages"][0]["created_at"] = "yesterday " + SECRET
    elif change == "time after year 9999":
        legacy["created_at"] = 1e20
    elif change == "ISO time past year 9999 in UTC":
        legacy["messages"][1]["created_at"] = "9999-12-31T23:00:00-05:00"
    elif change == "number as text":
        legacy["chat_id"] = 351900000000
    elif change == "user of another channel":
        legacy["user_id"] = "telegram:1001"  # no whatsapp chat could ever reach it
    elif change == "user without an id":
        legacy["user_id"] = "whatsapp:"
    elif change == "unknown parent":
        doc["sessions"][0]["parent_session_id"] = "nowhere"
    elif change == "parent cycle":
        legacy["parent_session_id"] = "fork1"
    elif change == "not an object":
        return [doc]
    elif change == "invalid json":
        return json.dumps(doc)[:-40]
    return doc


FAILURES = {  # change -> what the logged reason says
    "invalid json": "document: Invalid JSON",
    "not an object": "document: Input should be an object",
    "bad role": "sessions.1.messages.1.role: Input should be 'user'",
    "missing field": "sessions.1.chat_id: Field required",
    "extra field": "sessions.1.messages.0.author: Extra inputs are not permitted",
    "duplicate seq": "sessions.1: Value error, duplicate seq in one session",
    "duplicate session id": "document: Value error, duplicate session id",
    "wrong version": "version: Input should be 1",
    "bool time": "sessions.1.created_at: Value error, a time must be",
    "bad time": "sessions.1.messages.0.created_at: Value error, not an ISO 8601",
    "time after year 9999": "sessions.1.created_at: Value error, a time must be between",
    "ISO time past year 9999 in UTC": "sessions.1.messages.1.created_at: Value error, a time",
    "number as text": "sessions.1.chat_id: Input should be a valid string",
    "user of another channel": "sessions.1: Value error, user_id must be 'whatsapp:' and",
    "user without an id": "sessions.1: Value error, user_id must be 'whatsapp:' and",
    "unknown parent": "a session's parent_session_id 'nowhere' does not exist",
    "parent cycle": "document: Value error, parent_session_id links form a cycle",
}


@pytest.mark.parametrize("change", list(FAILURES))
async def test_a_bad_file_is_kept_and_nothing_is_written(
    db: Database, data_dir: Path, caplog: pytest.LogCaptureFixture, change: str
) -> None:
    await SessionRepo(db).create("tui", "local", "tui:local")
    before = await table_counts(db)
    path = write(data_dir, _mutate(change))
    original = path.read_bytes()

    result = await import_sessions_json(db, data_dir)

    assert result is not None and not result.ok and result.error
    assert result.error.startswith(FAILURES[change])
    assert path.read_bytes() == original
    assert not (data_dir / "sessions.json.migrated").exists()
    assert await table_counts(db) == before
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    line = warnings[0].getMessage()
    assert "\n" not in line and "sessions.json" in line and result.error in line
    assert SECRET not in line and "Stripes" not in line


async def test_a_constraint_error_midway_rolls_back_everything(
    db: Database, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The second session's insert fails inside SQLite after the first one went in.
    async with db.transaction() as conn:
        await conn.execute(
            "CREATE TRIGGER boom BEFORE INSERT ON messages WHEN NEW.content = 'be brief'"
            " BEGIN SELECT RAISE(ABORT, 'constraint failed: boom'); END"
        )
    path = write(data_dir, snapshot())
    result = await import_sessions_json(db, data_dir)
    assert result is not None and result.error == "constraint failed: boom"
    assert path.is_file()
    assert await table_counts(db) == {
        "sessions": 0,
        "messages": 0,
        "current_sessions": 0,
        "search_index": 0,
    }
    assert "constraint failed: boom" in caplog.text


async def test_an_empty_snapshot_is_accepted_and_renamed(db: Database, data_dir: Path) -> None:
    write(data_dir, {"version": 1, "sessions": []})
    result = await import_sessions_json(db, data_dir)
    assert result is not None and result.ok and result.sessions_imported == 0
    assert (data_dir / "sessions.json.migrated").is_file()


async def test_the_runtime_redacts_imported_messages_like_live_ones(data_dir: Path) -> None:
    data = snapshot()
    leak = "my key is sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX and password: hunter22"
    data["sessions"][1]["messages"][1]["content"] = leak
    write(data_dir, data)
    # The snapshot is from 2024: a 90-day retention run at start would race the reads.
    settings = Settings(
        data={"dir": str(data_dir)},  # type: ignore[arg-type]
        session={"retention": {"max_age_days": 36_500}},  # type: ignore[arg-type]
    )
    async with open_runtime(settings, provider=ScriptedProvider()) as rt:
        live = rt.db.redact(leak)
        row = await rt.db.fetchone(
            "SELECT picobot_open(content), token_estimate FROM messages"
            " WHERE session_id = 'legacy1' AND seq_order = 2"
        )
        assert row is not None and row[0] == live
        assert "hunter22" not in live and "sk-proj-" not in live
        assert row[1] == rt.kernel.estimator.estimate(live)
        await SearchIndex(rt.db).index_pending()
        found = await SearchIndex(rt.db).search(USER, ["hunter22"])
        assert found == []


async def test_the_latest_accepted_time_still_exports(db: Database, data_dir: Path) -> None:
    # Every time the import accepts converts back to a date: before, 1e20 was stored
    # and then `picobot export`, `picobot sessions` and the admin API raised.
    doc = snapshot()
    doc["sessions"][1]["last_active"] = "9999-12-31T23:59:59Z"
    write(data_dir, doc)
    result = await import_sessions_json(db, data_dir)
    assert result is not None and result.ok
    out = io.StringIO()
    await export_user(db, USER, out)
    assert '"last_active":"9999-12-31T23:59:59+00:00"' in out.getvalue()


def database_bytes(data_dir: Path) -> bytes:
    """The database file and its WAL (the imported file is kept beside them, renamed)."""
    return b"".join(p.read_bytes() for p in sorted(data_dir.glob("conversations.db*")))


async def test_an_import_is_sealed_and_exports_in_clear_under_per_user_keys(
    data_dir: Path,
) -> None:
    write(data_dir, snapshot())
    settings = Settings(
        data={"dir": str(data_dir)},  # type: ignore[arg-type]
        session={"retention": {"max_age_days": 36_500}},  # type: ignore[arg-type]
    )
    async with open_runtime(settings, provider=ScriptedProvider()) as rt:
        assert rt.db.sealer.keyed
        await rt.db.checkpoint()
        stored = await asyncio.to_thread(database_bytes, data_dir)
        assert SECRET.encode() not in stored and b"Stripes" not in stored
        out = io.StringIO()
        await export_user(rt.db, USER, out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    said = [r["content"] for r in lines if r["type"] == "message"]
    assert "A zebra! " + SECRET in said and "I keep a zebra named Stripes" in said
