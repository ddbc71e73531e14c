"""The command line's store commands (sessions, migrate, memories) on a real SQLite file."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from picobot.cli.main import main

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


async def _seed(db_path: Path) -> dict[str, str]:
    """Three sessions: alice has two (2 and 1 messages), bob one (no messages)."""
    from picobot.store.conversation.messages import MessageRepo
    from picobot.store.conversation.sessions import SessionRepo
    from picobot.store.db import Database

    db = await Database.open(db_path)
    try:
        repo, messages = SessionRepo(db), MessageRepo(db)
        ids = {
            "alice-old": await repo.create("tui", "local", "tui:alice"),
            "alice-new": await repo.create("tui", "local", "tui:alice"),
            "bob": await repo.create("ws", "c1", "ws:bob"),
        }
        for offset, sid in enumerate(ids.values()):
            await db.execute_write(
                "UPDATE sessions SET created_at = ?, last_active = ? WHERE id = ?",
                (T0, T0 + 60 * offset, sid),
            )
        await messages.append(ids["alice-old"], "user", "hi", 1, created_at=T0)
        await messages.append(ids["alice-old"], "assistant", "hello", 1, created_at=T0)
        await messages.append(ids["alice-new"], "user", "again", 1, created_at=T0 + 3600)
        return ids
    finally:
        await db.close()


def test_sessions_without_a_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions"]) == 0
    expected = Path("data") / "conversations.db"
    assert capsys.readouterr().out == f"no database at {expected}; no sessions yet\n"
    assert not (tmp_path / "data").exists()


def test_sessions_lists_most_recent_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    ids = asyncio.run(_seed(tmp_path / "data" / "conversations.db"))
    assert main(["sessions"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "USER", "CHANNEL", "CREATED", "LAST", "ACTIVE", "MESSAGES"]
    rows = [line.split() for line in lines[1:]]
    assert [r[0] for r in rows] == [ids["alice-new"], ids["bob"], ids["alice-old"]]
    assert rows[0] == [
        ids["alice-new"],
        "tui:alice",
        "tui",
        "2023-11-14",
        "22:13:20Z",
        "2023-11-14",
        "23:13:20Z",
        "1",
    ]
    assert rows[1][1:3] == ["ws:bob", "ws"] and rows[1][-1] == "0"
    assert rows[2][-1] == "2"

    assert main(["sessions", "--user", "tui:alice", "--limit", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == [ids["alice-new"]]

    assert main(["sessions", "--user", "tui:nobody"]) == 0
    assert capsys.readouterr().out == "no sessions for tui:nobody\n"


def test_sessions_limit_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "--limit", "0"]) == 2
    assert "must be at least 1" in capsys.readouterr().err


def test_migrate_creates_then_reports_up_to_date(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from picobot.store.migrations import MIGRATIONS

    monkeypatch.setenv("PICOBOT_DATA__DIR", str(tmp_path / "state"))
    db_path = tmp_path / "state" / "conversations.db"
    assert main(["migrate"]) == 0
    out = capsys.readouterr().out
    assert db_path.is_file()
    assert out.splitlines()[0] == f"database: {db_path}"
    assert re.search(r"^\s+1\s+m001_core_tables\s+\(applied now\)$", out, re.M)
    n = len(MIGRATIONS)
    assert out.splitlines()[-1] == f"schema version: {n} of {n}; applied {n} migration(s)"

    assert main(["migrate"]) == 0
    out = capsys.readouterr().out
    assert "(applied now)" not in out
    assert re.search(r"^\s+1\s+m001_core_tables$", out, re.M)
    assert out.splitlines()[-1] == f"schema version: {n} of {n}; up to date"


def test_store_unavailable_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "blocker").write_text("not a directory", encoding="utf-8")
    monkeypatch.setenv("PICOBOT_DATA__DIR", str(tmp_path / "blocker" / "data"))
    assert main(["migrate"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("picobot: error: cannot create data directory")
    assert "Traceback" not in err and err.count("\n") == 1


def test_memories_command_sets_lists_and_deletes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memories", "--user", "tui:alice", "--set", "city", "Lisbon"]) == 0
    assert main(["memories", "--user", "tui:bob"]) == 0
    assert "no memories for tui:bob" in capsys.readouterr().out
    assert main(["memories", "--user", "tui:alice"]) == 0
    assert "city: Lisbon" in capsys.readouterr().out
    assert main(["memories", "--user", "tui:alice", "--set", "Bad Key", "x"]) == 1
    assert "not allowed" in capsys.readouterr().err
    assert main(["memories", "--user", "tui:alice", "--delete", "city"]) == 0
    assert main(["memories", "--user", "tui:alice", "--delete", "city"]) == 1
