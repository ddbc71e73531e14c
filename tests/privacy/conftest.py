"""Fixtures shared by the privacy tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from picobot.store.db import Database


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    """A fresh database at ``tmp_path/data/conversations.db`` (the data dir is its parent)."""
    database = await Database.open(tmp_path / "data" / "conversations.db")
    yield database
    await database.close()
