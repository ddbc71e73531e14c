"""``--json`` output: one parseable object per command, with the keys docs/cli.md lists.

Each test compares the exact key sets, so a renamed or dropped key (a break for the
scripts that read it) fails here and must be a deliberate, documented change.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from picobot.cli.main import main
from picobot.config.learning import LearningSettings, learning_state
from picobot.config.settings import LLMSettings
from picobot.store.migrations import MIGRATIONS
from tests.cli.test_purge import BOB
from tests.cli.test_store_commands import _seed as seed_sessions

DB = Path("data") / "conversations.db"
COUNT_KEYS = {
    "sessions",
    "messages",
    "summaries",
    "memories",
    "index_entries",
    "tool_records",
    "webhook_rows",
    "facts",
    "digests",
    "total",
}


def run_json(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> Any:
    """Run ``picobot ARGV --json``; check the exit status; parse stdout."""
    assert main([*argv, "--json"]) == status
    return json.loads(capsys.readouterr().out)


def seed(tmp_path: Path) -> dict[str, str]:
    """alice's two sessions (2 and 1 messages) and bob's (none), all from 2023."""
    return asyncio.run(seed_sessions(tmp_path / DB))


def is_utc_iso(text: str) -> bool:
    return datetime.fromisoformat(text).utcoffset() is not None


def test_status_json_without_a_database(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_json(capsys, "status") == {
        "learning": {
            "on": False,
            "model": "the bundled SmolLM2-135M",
            "reason": learning_state(LearningSettings(), LLMSettings()).reason,
        },
        "database": {
            "path": str(DB),
            "engine": "sqlite",
            "exists": False,
            "size_bytes": None,
            "wal_bytes": None,
        },
        "schema": None,
        "contents": None,
        "retention": None,
        "connections": None,
        "warnings": [],
    }


def test_status_json_reports_contents_and_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(tmp_path)
    report = run_json(capsys, "status", status=4)
    assert set(report) == {
        "learning", "database", "schema", "contents", "retention", "connections", "warnings"
    }  # fmt: skip
    assert report["connections"] == []  # no outbound connection has run
    assert report["database"]["exists"] is True and report["database"]["size_bytes"] > 0
    n = len(MIGRATIONS)
    assert report["schema"] == {"version": n, "known": n, "state": "current"}
    assert report["contents"] == {
        "sessions": 3,
        "messages": 3,
        "memories": 0,
        "queued_for_index": 3,
    }
    assert report["retention"]["last_run"] is None
    assert report["warnings"] == [
        "retention has never run; start the server or run `retention run`"
    ]

    assert main(["retention", "run"]) == 0
    capsys.readouterr()
    report = run_json(capsys, "status")
    assert report["warnings"] == []
    retention = report["retention"]
    assert set(retention) == {
        "interval_secs",
        "last_run",
        "residue_waiting_since",
        "erase_due",
        "purge_residue_since",
    }
    last = retention["last_run"]
    assert set(last) == {
        "last_started_at",
        "last_finished_at",
        "ok",
        "unfinished",
        "result",
        "error",
    }
    assert last["ok"] is True and last["unfinished"] is False and last["error"] is None
    assert is_utc_iso(last["last_started_at"]) and is_utc_iso(last["last_finished_at"])


def test_status_json_for_a_schema_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(tmp_path)
    with sqlite3.connect(tmp_path / DB) as conn:
        conn.execute("DELETE FROM _migrations WHERE version = ?", (len(MIGRATIONS),))
    report = run_json(capsys, "status", status=4)
    n = len(MIGRATIONS)
    assert report["schema"] == {"version": n - 1, "known": n, "state": "behind"}
    assert report["contents"] is None and report["retention"] is None
    assert report["warnings"][0].startswith("1 migration(s) pending; run `picobot migrate`")


def test_sessions_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_json(capsys, "sessions") == {"sessions": []}  # no database yet, none made
    assert not (tmp_path / "data").exists()
    ids = seed(tmp_path)
    sessions = run_json(capsys, "sessions", "--user", "tui:alice", "--limit", "1")["sessions"]
    (only,) = sessions
    assert set(only) == {
        "id",
        "user_id",
        "channel",
        "chat_id",
        "parent_session_id",
        "created_at",
        "last_active",
        "message_count",
    }
    assert only["id"] == ids["alice-new"]
    assert (only["user_id"], only["channel"], only["chat_id"]) == ("tui:alice", "tui", "local")
    assert only["message_count"] == 1 and only["parent_session_id"] is None
    assert only["created_at"] == "2023-11-14T22:13:20+00:00"
    assert only["last_active"] == "2023-11-14T23:13:20+00:00"
    assert len(run_json(capsys, "sessions")["sessions"]) == 3


def test_memories_json(capsys: pytest.CaptureFixture[str]) -> None:
    user = BOB.user_id
    assert run_json(capsys, "memories", "--user", user) == {"user_id": user, "memories": []}
    saved = run_json(capsys, "memories", "--user", user, "--set", "city", "Lisbon")
    assert saved["user_id"] == user
    assert set(saved["saved"]) == {"key", "content", "created_at", "updated_at", "sensitive"}
    assert (saved["saved"]["key"], saved["saved"]["content"]) == ("city", "Lisbon")
    listed = run_json(capsys, "memories", "--user", user)
    assert listed == {"user_id": user, "memories": [saved["saved"]]}
    deleted = run_json(capsys, "memories", "--user", user, "--delete", "city")
    assert deleted == {"user_id": user, "deleted": "city"}
    # A failure is an error on stderr and exit 1, never half a JSON document.
    assert main(["memories", "--user", user, "--delete", "city", "--json"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == f"picobot: error: {user} has no memory city\n"


def test_retention_run_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = run_json(capsys, "retention", "run")  # no database: nothing to delete
    assert empty["cutoff"] is None and empty["counts"]["total"] == 0
    seed(tmp_path)
    dry = run_json(capsys, "retention", "run", "--dry-run")
    assert set(dry) == {
        "dry_run",
        "max_age_days",
        "cutoff",
        "counts",
        "duration_secs",
        "residue_erased",
        "erase_due",
    }
    assert set(dry["counts"]) == COUNT_KEYS
    assert dry["dry_run"] is True and dry["max_age_days"] == 90 and is_utc_iso(dry["cutoff"])
    assert (dry["counts"]["sessions"], dry["counts"]["messages"]) == (3, 3)
    assert dry["residue_erased"] is False
    done = run_json(capsys, "retention", "run")
    assert done["dry_run"] is False and done["counts"] == dry["counts"]
    assert done["residue_erased"] is True
    again = run_json(capsys, "retention", "run")
    assert again["counts"]["total"] == 0


def test_migrate_json(capsys: pytest.CaptureFixture[str]) -> None:
    n = len(MIGRATIONS)
    first = run_json(capsys, "migrate")
    assert set(first) == {
        "database",
        "schema_version",
        "known_version",
        "applied_now",
        "sealed_now",
        "migrations",
    }
    assert first["database"] == str(DB)
    assert (first["schema_version"], first["known_version"]) == (n, n)
    assert len(first["applied_now"]) == n
    assert first["migrations"][0] == {
        "version": 1,
        "name": "m001_core_tables",
        "applied_now": True,
    }
    second = run_json(capsys, "migrate")
    assert second["applied_now"] == []
    assert not any(m["applied_now"] for m in second["migrations"])
