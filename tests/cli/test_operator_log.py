"""Operator actions from the CLI leave one log line each: scope, actor, counts, no content.

The log is the real one: ``[logging] file`` from a real config file, or stderr, written
by the same handler set-up ``serve`` uses; the store is a real SQLite file.
"""

from __future__ import annotations

import os
import pwd
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from picobot.cli.main import main
from picobot.config.settings import Settings
from tests.cli.test_purge import ALICE, BOB, seed_with

SECRET = "zebra-cobalt-4471"
"""Marker in every piece of content the tests store; it must never reach the log."""
ACTOR = f"cli:{pwd.getpwuid(os.geteuid()).pw_name}"


@pytest.fixture
def log_file(write_config: Callable[..., Path], tmp_path: Path) -> Path:
    path = tmp_path / "logs" / "picobot.log"
    write_config(f'[logging]\nfile = "{path}"\n')
    return path


def log_lines(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    assert SECRET not in text
    return text.splitlines()


def age_everything(data_dir: Path, days: int) -> None:
    """Move every message and session ``days`` into the past (retention's input)."""
    shift = days * 86_400
    with sqlite3.connect(data_dir / "conversations.db") as conn:
        conn.execute("UPDATE messages SET created_at = created_at - ?", (shift,))
        conn.execute(
            "UPDATE sessions SET created_at = created_at - ?, last_active = last_active - ?",
            (shift, shift),
        )


def test_a_purge_is_logged_with_actor_scope_and_counts(tmp_path: Path, log_file: Path) -> None:
    seed_with(tmp_path / "data", f"my plan is {SECRET}")
    assert main(["purge", "user", ALICE.user_id, "--yes"]) == 0
    (line,) = [line for line in log_lines(log_file) if "purge" in line]
    assert f"by {ACTOR} (operator)" in line
    assert "user_id='tui:alice'" in line and "1 session, 2 messages" in line


def test_a_retention_run_is_logged_with_the_operator(tmp_path: Path, log_file: Path) -> None:
    seed_with(tmp_path / "data", f"my plan is {SECRET}")
    age_everything(tmp_path / "data", 200)
    assert main(["retention", "run"]) == 0
    (line,) = [line for line in log_lines(log_file) if ACTOR in line]
    assert f"retention run by {ACTOR}: deleted 2 sessions, 4 messages" in line
    assert main(["retention", "run", "--dry-run"]) == 0
    assert f"retention dry run by {ACTOR}: would delete nothing" in log_lines(log_file)[-1]


def test_memory_changes_are_logged_without_key_or_content(log_file: Path) -> None:
    key = "zebra_cobalt_4471"  # the marker, as a key may hold personal data too
    assert main(["memories", "--user", BOB.user_id, "--set", key, SECRET]) == 0
    assert main(["memories", "--user", BOB.user_id, "--delete", key]) == 0
    assert main(["memories", "--user", BOB.user_id]) == 0  # a listing changes nothing
    lines = [line for line in log_lines(log_file) if ACTOR in line]
    assert key not in log_file.read_text(encoding="utf-8")
    assert [line.split(": ", 1)[1] for line in lines] == [
        f"memory change by {ACTOR}: saved 1 memory of tui:bob",
        f"memory change by {ACTOR}: deleted 1 memory of tui:bob",
    ]


def test_without_a_log_file_the_line_goes_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_with(tmp_path / "data", f"my plan is {SECRET}")
    capsys.readouterr()
    assert main(["purge", "session", session_of(tmp_path, BOB.user_id), "--yes"]) == 0
    out, err = capsys.readouterr()
    assert SECRET not in out + err
    assert "INFO picobot.privacy.controller: purge executed: SessionScope(" in err
    assert f"by {ACTOR} (operator): 1 session, 2 messages" in err


def test_an_unwritable_log_file_stops_the_action(
    tmp_path: Path, write_config: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    seed_with(tmp_path / "data", "hello")
    (tmp_path / "blocker").write_text("a file where the log's folder should be")
    write_config(f'[logging]\nfile = "{tmp_path / "blocker" / "picobot.log"}"\n')
    assert main(["purge", "user", ALICE.user_id, "--yes"]) == 1
    assert capsys.readouterr().err.startswith("picobot: error: cannot write the log file ")
    settings = Settings(data={"dir": str(tmp_path / "data")})
    with sqlite3.connect(settings.db_path) as conn:
        users = {r[0] for r in conn.execute("SELECT user_id FROM sessions")}
    assert users == {ALICE.user_id, BOB.user_id}  # nothing was deleted unrecorded


def session_of(tmp_path: Path, user_id: str) -> str:
    with sqlite3.connect(tmp_path / "data" / "conversations.db") as conn:
        (sid,) = conn.execute("SELECT id FROM sessions WHERE user_id = ?", (user_id,)).fetchone()
    return str(sid)
