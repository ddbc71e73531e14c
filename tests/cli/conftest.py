"""The CLI's tests run ``picobot`` in a subprocess on the data directory's database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from picobot.store.db import Database


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated SQLite database at ``tmp_path/data/conversations.db`` on every store
    under test: the subprocess a test starts finds its data there, and the CLI has no
    setting for another store."""
    database = await Database.open(tmp_path / "data" / "conversations.db")
    yield database
    await database.close()
