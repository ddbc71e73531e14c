"""Commands that only read leave the schema alone: against real SQLite files at an older
and a newer schema version, through main() and once through ``python -m picobot``."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from picobot.cli.main import main
from picobot.config.learning import LearningSettings, learning_state
from picobot.config.settings import LLMSettings
from picobot.store.db import Database
from picobot.store.migrations import MIGRATIONS, apply_migrations
from tests.cli.test_main import run_picobot

DB = Path("data") / "conversations.db"
KNOWN = len(MIGRATIONS)
OLD = 7
READERS = [["sessions"], ["export", "--user", "tui:alice"], ["memories", "--user", "tui:alice"]]
"""The commands that only read; on an empty current database export alone exits 1."""


def make_database(path: Path, version: int) -> None:
    """A database migrated only up to ``version``, as an older PicoBot left it."""

    async def go() -> None:
        db = await Database.open(path, migrate=False)
        try:
            await apply_migrations(db, MIGRATIONS[:version])
        finally:
            await db.close()

    asyncio.run(go())


def schema_of(path: Path) -> tuple[list[tuple[int, str]], list[tuple[str, str, str]]]:
    """The recorded migrations and every schema object, to compare before and after."""
    with closing(sqlite3.connect(path)) as conn:
        versions = conn.execute("SELECT version, name FROM _migrations ORDER BY version")
        objects = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        return versions.fetchall(), objects.fetchall()


@pytest.fixture
def old_db(tmp_path: Path) -> Path:
    path = tmp_path / DB
    path.parent.mkdir()
    make_database(path, OLD)
    return path


def test_status_reports_an_old_schema_and_leaves_it(
    old_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = schema_of(old_db)
    assert main(["status"]) == 4
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[:2] == ["data directory: data ([data] dir)", f"database: {DB}"]
    assert lines[3] == f"schema version: {OLD} of {KNOWN}"
    assert lines[4:] == [
        f"learning: {learning_state(LearningSettings(), LLMSettings()).describe()}"
    ]
    assert err == (
        f"picobot: warning: {KNOWN - OLD} migration(s) pending; run `picobot migrate` to"
        " upgrade the database (status does not), then status shows its contents\n"
    )
    assert schema_of(old_db) == before


@pytest.mark.parametrize("argv", READERS)
def test_read_commands_refuse_an_old_schema_and_leave_it(
    old_db: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    before = schema_of(old_db)
    assert main(argv) == 1
    assert capsys.readouterr().err == (
        f"picobot: error: database {DB} has schema version {OLD} of {KNOWN}; run"
        " `picobot migrate` to upgrade it (this command only reads, so it does not)\n"
    )
    assert schema_of(old_db) == before
    # After the explicit upgrade the same command works.
    assert main(["migrate"]) == 0
    assert main(argv) == (1 if argv[0] == "export" else 0)
    assert "schema version" not in capsys.readouterr().err


def test_a_memory_write_migrates_as_every_write_does(
    old_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["memories", "--user", "tui:alice", "--set", "city", "Lisbon"]) == 0
    versions, _ = schema_of(old_db)
    assert versions[-1][0] == KNOWN
    assert main(["memories", "--user", "tui:alice"]) == 0
    assert "city: Lisbon" in capsys.readouterr().out


def test_memories_listing_creates_no_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["memories", "--user", "tui:alice"]) == 0
    assert capsys.readouterr().out == f"no database at {DB}; no memories for tui:alice\n"
    assert not (tmp_path / "data").exists()


def test_a_memory_delete_creates_no_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["memories", "--user", "tui:alice", "--delete", "city"]) == 1
    assert capsys.readouterr().err == (
        f"picobot: error: tui:alice has no memory city (no database at {DB})\n"
    )
    assert not (tmp_path / "data").exists()


def test_a_newer_schema_is_refused_and_reported(
    old_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["migrate"]) == 0
    with closing(sqlite3.connect(old_db)) as conn, conn:
        conn.execute("INSERT INTO _migrations VALUES (?, 'm999_future', 0)", (KNOWN + 1,))
    capsys.readouterr()
    before = schema_of(old_db)
    for argv in READERS:
        assert main(argv) == 1
        assert "newer than this PicoBot knows" in capsys.readouterr().err
    assert main(["status"]) == 4
    out, err = capsys.readouterr()
    assert f"schema version: {KNOWN + 1} of {KNOWN}" in out
    assert err == "picobot: warning: a newer PicoBot has upgraded this database; upgrade PicoBot\n"
    assert schema_of(old_db) == before


def test_status_and_sessions_as_processes(old_db: Path, tmp_path: Path) -> None:
    before = schema_of(old_db)
    status = run_picobot("status", cwd=tmp_path)
    assert status.returncode == 4, status.stderr
    assert f"schema version: {OLD} of {KNOWN}" in status.stdout
    assert "run `picobot migrate`" in status.stderr
    sessions = run_picobot("sessions", cwd=tmp_path)
    assert sessions.returncode == 1
    assert "run `picobot migrate`" in sessions.stderr and "Traceback" not in sessions.stderr
    assert schema_of(old_db) == before
