"""Shared fixtures: every test runs in its own empty directory with a clean environment."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import NoReturn

import pytest

from picobot.config.keys import KeySettings
from picobot.config.store import StoreSettings
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


StoreOpener = Callable[[], Awaitable[Database]]
"""Opens a :class:`Database` on the test's store (the ``open_store`` fixture)."""

STORE = os.environ.get("PICOBOT_TEST_STORE", "sqlite")
"""The engine the ``db`` fixture opens: ``sqlite`` (default) or ``postgresql`` (a
database of its own on ``postgres_server``, sealed with a key store in the data dir).
Read at import, before ``isolated`` clears PICOBOT_* for each test."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``PICOBOT_TEST_STORE=postgresql`` only the tests of the store's operations
    run (those taking the ``db`` fixture: the rest would run on SQLite a second time),
    and those marked ``sqlite_only`` are skipped."""
    if STORE != "postgresql":
        return
    kept = [item for item in items if "db" in getattr(item, "fixturenames", ())]
    config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept
    skip = pytest.mark.skip(reason="SQLite-specific (FTS5, WAL or file layout)")
    for item in kept:
        if item.get_closest_marker("sqlite_only"):
            item.add_marker(skip)


@pytest.fixture
def open_store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[StoreOpener]:
    """Opens a :class:`Database` on this test's store: a migrated database at
    ``tmp_path/data/conversations.db`` (alone in its data dir), or on PostgreSQL when
    ``PICOBOT_TEST_STORE=postgresql`` (see :data:`STORE`). Each call opens another
    ``Database`` on the same data, as another PicoBot process would; the caller closes it.
    """
    path = tmp_path / "data" / "conversations.db"
    if STORE != "postgresql":
        yield lambda: Database.open(path)
        return
    url = request.getfixturevalue("postgres_url")
    ring = open_keyring(path.parent, KeySettings(), {}, url=url)
    try:
        yield lambda: Database.open(path, url=url, keys=ring)
    finally:
        ring.close()


@pytest.fixture
def store_settings(request: pytest.FixtureRequest) -> StoreSettings:
    """The ``[store]`` section that reaches this test's store (the ``db`` fixture's), for
    commands and runtimes a test starts on it."""
    if STORE != "postgresql":
        return StoreSettings()
    return StoreSettings(url=str(request.getfixturevalue("postgres_url")))


@pytest.fixture
async def db(open_store: StoreOpener) -> AsyncIterator[Database]:
    """The test's database (see :func:`open_store`).

    Directories and modules that need another (a short busy timeout, seeded rows)
    define their own ``db``, which takes precedence.
    """
    database = await open_store()
    yield database
    await database.close()


@pytest.fixture
def reopen(
    open_store: StoreOpener,
) -> Callable[[Database], AbstractAsyncContextManager[Database]]:
    """``async with reopen(db) as again``: the ``db`` fixture's store opened once more, as
    a restart opens it (:func:`open_store`); closed at the block's end."""

    @asynccontextmanager
    async def again(db: Database) -> AsyncIterator[Database]:
        database = await open_store()
        try:
            yield database
        finally:
            await database.close()

    return again


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
