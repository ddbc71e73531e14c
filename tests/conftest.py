"""Shared fixtures: every test runs in its own empty directory with a clean environment."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from picobot.store.db import Database


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Clear PICOBOT_* variables, set the data directory to ./data, chdir into tmp_path.

    A developer's ./config.toml, exported PICOBOT_* settings or .env, the host's
    /run/secrets and the real user data directory must never change what a test sees,
    nor be written to. Tests of the default data location delete PICOBOT_DATA__DIR; the
    user data directory then lies under tmp_path. Recall by meaning is off
    (``[embeddings] provider = "none"``) unless a test turns it on: the default, ``auto``,
    would run the embedding model in every runtime a test opens.
    """
    for name in list(os.environ):
        if name.upper().startswith("PICOBOT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PICOBOT_DATA__DIR", "data")
    monkeypatch.setenv("PICOBOT_SECRETS_DIR", "")
    monkeypatch.setenv("PICOBOT_EMBEDDINGS__PROVIDER", "none")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """Write TOML text to a file under tmp_path (default ``config.toml``); return its path."""

    def write(text: str, name: str = "config.toml") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated database at ``tmp_path/data/conversations.db`` (alone in its data dir).

    Directories and modules that need another (a short busy timeout, seeded rows)
    define their own ``db``, which takes precedence.
    """
    database = await Database.open(tmp_path / "data" / "conversations.db")
    yield database
    await database.close()
