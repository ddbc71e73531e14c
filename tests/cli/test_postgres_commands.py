"""The commands on a PostgreSQL store (``[store] url``): migrate, status, backup, restore."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from picobot.cli.main import main
from picobot.store.migrations import MIGRATIONS


@pytest.fixture
def on_postgres(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The commands' store is a fresh PostgreSQL database, reached as a user with a
    password in the URL variable (``url_env``), as an operator would."""
    monkeypatch.setenv("PICOBOT_STORE__URL_ENV", "TEST_DATABASE_URL")
    with_password = postgres_url.replace("postgres@", "postgres:hunter2-secret@", 1)
    monkeypatch.setenv("TEST_DATABASE_URL", with_password)
    return postgres_url


def run_json(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> Any:
    assert main([*argv, "--json"]) == status
    out = capsys.readouterr().out
    assert "hunter2-secret" not in out
    return json.loads(out)


def test_migrate_then_status_name_the_database_without_its_password(
    on_postgres: str, capsys: pytest.CaptureFixture[str]
) -> None:
    migrated = run_json(capsys, "migrate")
    assert migrated["database"].startswith("postgresql://postgres:***@127.0.0.1:")
    assert migrated["schema_version"] == len(MIGRATIONS)
    assert len(migrated["applied_now"]) == len(MIGRATIONS)
    again = run_json(capsys, "migrate")
    assert again["applied_now"] == []
    status = run_json(capsys, "status", status=4)  # retention has never run: a warning
    assert status["database"]["engine"] == "postgresql"
    assert status["database"]["exists"] is True and status["database"]["wal_bytes"] is None
    assert status["database"]["size_bytes"] > 0
    assert status["schema"]["state"] == "current"
    assert status["contents"]["messages"] == 0
    assert not Path("data/conversations.db").exists()  # nothing went to a SQLite file


def test_backup_copies_the_key_store_and_restore_points_to_pg_restore(
    on_postgres: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_json(capsys, "migrate")
    backup = run_json(capsys, "backup")
    assert backup["database"] is None
    assert Path(backup["keys"]).is_file()
    assert main(["restore", "some-file", "--yes"]) != 0
    assert "pg_restore" in capsys.readouterr().err


def test_a_password_in_the_config_file_is_refused(
    postgres_url: str, write_config: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(f'[store]\nurl = "{postgres_url.replace("postgres@", "postgres:pw1@", 1)}"\n')
    assert main(["status"]) != 0
    err = capsys.readouterr().err
    assert "PGPASSWORD" in err and "pw1" not in err
