"""Shared fixtures: every test runs in its own empty directory with a clean environment."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import NoReturn

import pytest

from picobot.config.keys import KeySettings
from picobot.store.db import Database
from picobot.store.keys import open_keyring
from tests.pg import cluster


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


STORE = os.environ.get("PICOBOT_TEST_STORE", "sqlite")
"""The engine the ``db`` fixture opens: ``sqlite`` (default) or ``postgresql`` (a
database of its own on ``postgres_server``, sealed with a key store in the data dir).
Read at import, before ``isolated`` clears PICOBOT_* for each test."""


@pytest.fixture
async def db(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Database]:
    """A migrated database at ``tmp_path/data/conversations.db`` (alone in its data dir),
    or on PostgreSQL when ``PICOBOT_TEST_STORE=postgresql`` (see :data:`STORE`).

    Directories and modules that need another (a short busy timeout, seeded rows)
    define their own ``db``, which takes precedence.
    """
    path = tmp_path / "data" / "conversations.db"
    if STORE != "postgresql":
        database = await Database.open(path)
        yield database
        await database.close()
        return
    url = request.getfixturevalue("postgres_url")
    ring = open_keyring(path.parent, KeySettings(), {})
    try:
        database = await Database.open(path, url=url, keys=ring)
        yield database
        await database.close()
    finally:
        ring.close()


@pytest.fixture
def reopen(
    request: pytest.FixtureRequest,
) -> Callable[[Database], AbstractAsyncContextManager[Database]]:
    """``async with reopen(db) as again``: the ``db`` fixture's database opened once more,
    as a restart opens it (the same file, or the same PostgreSQL database with the data
    directory's key store); closed at the block's end."""

    @asynccontextmanager
    async def again(db: Database) -> AsyncIterator[Database]:
        if db.engine.name != "postgresql":
            database = await Database.open(db.path)
            try:
                yield database
            finally:
                await database.close()
            return
        url = request.getfixturevalue("postgres_url")
        ring = open_keyring(db.path.parent, KeySettings(), {})
        try:
            database = await Database.open(db.path, url=url, keys=ring)
            try:
                yield database
            finally:
                await database.close()
        finally:
            ring.close()

    return again


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip tests marked ``sqlite_only`` when the store under test is PostgreSQL: what
    they assert is SQLite's own (FTS5, the WAL, bytes of the database file)."""
    if STORE != "postgresql":
        return
    skip = pytest.mark.skip(reason="SQLite-specific (FTS5, WAL or file layout)")
    for item in items:
        if item.get_closest_marker("sqlite_only") is not None:
            item.add_marker(skip)


def _no_postgres(reason: str) -> NoReturn:
    """Skip, or fail when ``PICOBOT_REQUIRE_POSTGRES=1`` (CI that installed PostgreSQL)."""
    if os.environ.get("PICOBOT_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PICOBOT_REQUIRE_POSTGRES=1, but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_bindir() -> Path:
    """The PostgreSQL server binaries' directory (see ``cluster.find_bindir``).

    Skips when there are none, failing instead under ``PICOBOT_REQUIRE_POSTGRES=1``.
    """
    bindir = cluster.find_bindir()
    if bindir is None:
        _no_postgres(
            "no PostgreSQL server binaries (initdb, pg_ctl, postgres): install Debian's "
            "postgresql package, set PICOBOT_PG_BINDIR, or set PICOBOT_TEST_POSTGRES to a "
            "server's URL"
        )
    return bindir


@pytest.fixture(scope="session")
def postgres_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of a PostgreSQL server for this test session, as a role that may create
    databases: ``$PICOBOT_TEST_POSTGRES`` if set (a ``postgresql://`` URL of a server that
    is already running, e.g. from ``make pg``), else a throwaway cluster started now and
    deleted at the session's end. Tests take their own database from ``postgres_url``.

    Session fixtures are set up before the autouse ``isolated`` clears PICOBOT_*.
    """
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _no_postgres("psycopg is not installed (the [postgres] extra)")
    existing = os.environ.get("PICOBOT_TEST_POSTGRES")
    if existing:
        yield existing
        return
    with cluster.Cluster.start(request.getfixturevalue("postgres_bindir")) as server:
        yield server.url


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """The URL of a new, empty database of its own for one test, dropped after it."""
    with cluster.temporary_database(postgres_server) as url:
        yield url
