"""The default data directory: ./data in a project directory, else the user data directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from picobot.cli.common import EXIT_ATTENTION, EXIT_OK
from picobot.cli.main import main
from picobot.config.settings import load_settings
from tests.cli.test_main import run_picobot

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def user_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No [data] dir: the default rule applies; returns the user data directory."""
    monkeypatch.delenv("PICOBOT_DATA__DIR")
    return tmp_path / "xdg-data" / "picobot"


def test_a_bare_directory_uses_the_user_data_directory(user_data: Path) -> None:
    location = load_settings().data_location
    assert location.path == user_data
    assert "user data directory" in location.reason


@pytest.mark.parametrize("marker", ["config.toml", "data"])
def test_a_project_directory_keeps_its_data_in_dot_data(
    user_data: Path, tmp_path: Path, marker: str
) -> None:
    if marker == "data":
        (tmp_path / "data").mkdir()
    else:
        (tmp_path / "config.toml").write_text("")
    location = load_settings().data_location
    assert location.path == Path("data")
    assert location.reason == f"./{marker} is in the working directory"


def test_data_dir_in_the_config_wins(user_data: Path, tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(f'[data]\ndir = "{tmp_path / "elsewhere"}"\n')
    settings = load_settings()
    assert settings.db_path == tmp_path / "elsewhere" / "conversations.db"
    assert settings.data_location.reason == "[data] dir"


def test_the_choice_is_made_once_per_load(user_data: Path, tmp_path: Path) -> None:
    settings = load_settings()
    (tmp_path / "data").mkdir()  # created while running: the database must not move
    assert settings.data_dir == user_data
    assert load_settings().data_dir == Path("data")


def test_status_says_which_data_directory_and_why(
    user_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status"]) == EXIT_OK
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (
        f"data directory: {user_data} (the user data directory: no ./config.toml or ./data here)"
    )
    assert not user_data.exists()  # status creates nothing


def test_any_directory_finds_the_same_database(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    # The subprocess inherits XDG_DATA_HOME and HOME under tmp_path from `isolated`.
    created = run_picobot("migrate", cwd=one)
    assert created.returncode == 0, created.stderr
    db = tmp_path / "xdg-data" / "picobot" / "conversations.db"
    assert f"database: {db}" in created.stdout
    status = run_picobot("status", cwd=two)
    # Attention (4): retention has never run in this new database.
    assert status.returncode == EXIT_ATTENTION, status.stderr
    assert f"database: {db}\n" in status.stdout and "schema version" in status.stdout
    assert not (one / "data").exists() and not (two / "data").exists()


def test_a_checkout_keeps_make_run_data_in_dot_data() -> None:
    # `make run` starts in the checkout: its tracked data/ keeps the database there.
    assert (REPO / "data" / ".gitkeep").is_file()
