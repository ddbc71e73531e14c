"""The throwaway PostgreSQL cluster and the per-test databases of tests/conftest.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.pg import cluster


def user_relations(conn: psycopg.Connection[tuple[object, ...]]) -> list[object]:
    """Tables, views, sequences... outside the system schemas."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')"
        " AND n.nspname NOT LIKE 'pg_toast%'"
    ).fetchall()
    return [row[0] for row in rows]


def database_exists(server_url: str, database_url: str) -> bool:
    with psycopg.connect(server_url) as conn:
        found = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [cluster.database_name(database_url)]
        ).fetchone()
        return found is not None


def leftover_directories() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("picobot-pg-*"))


def test_cluster_serves_on_loopback_and_its_socket_then_leaves_nothing(
    postgres_bindir: Path,
) -> None:
    with cluster.Cluster.start(postgres_bindir) as server:
        directory = server.directory
        pid = int((server.data_dir / "postmaster.pid").read_text().split()[0])
        with psycopg.connect(server.url) as conn:
            row = conn.execute(
                "SELECT current_user, current_database(), host(inet_server_addr()),"
                " current_setting('listen_addresses'), current_setting('fsync'),"
                " current_setting('synchronous_commit'), current_setting('full_page_writes'),"
                " current_setting('max_connections'), current_setting('server_encoding'),"
                " current_setting('lc_collate')"
            ).fetchone()
        expected = ("postgres", "postgres", "127.0.0.1", "127.0.0.1", "off", "off", "off")
        assert row == (*expected, "200", "UTF8", "C")
        with psycopg.connect(
            host=str(server.socket_dir), port=server.port, user="postgres", dbname="postgres"
        ) as conn:
            # No server address: the connection came through the unix socket.
            assert conn.execute("SELECT inet_server_addr()").fetchone() == (None,)
        assert (server.socket_dir / f".s.PGSQL.{server.port}").is_socket()
        if os.geteuid() == 0:
            # PostgreSQL refuses root: the server runs as an unprivileged account.
            assert server.data_dir.stat().st_uid != 0
            assert Path(f"/proc/{pid}").stat().st_uid != 0
        assert cluster.running(pid)
    assert not directory.exists()
    assert not cluster.running(pid)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(server.url, connect_timeout=5)
    server.stop()  # a second stop does nothing


def test_a_failed_start_leaves_no_directory(tmp_path: Path) -> None:
    before = leftover_directories()
    with pytest.raises(cluster.ClusterError, match="initdb"):
        cluster.Cluster.start(tmp_path)  # no server binaries there
    assert leftover_directories() == before


def test_bindir_from_the_environment_must_hold_the_server(
    postgres_bindir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PICOBOT_PG_BINDIR", str(postgres_bindir))
    assert cluster.find_bindir() == postgres_bindir
    monkeypatch.setenv("PICOBOT_PG_BINDIR", str(tmp_path))
    with pytest.raises(cluster.ClusterError, match="PICOBOT_PG_BINDIR"):
        cluster.find_bindir()


def test_postgres_url_is_a_fresh_empty_database_of_its_own(
    postgres_server: str, postgres_url: str
) -> None:
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == (
            cluster.database_name(postgres_url),
        )
        assert cluster.database_name(postgres_url) != cluster.database_name(postgres_server)
        assert user_relations(conn) == []
        conn.execute("CREATE TABLE notes (id int)")
        conn.commit()
        assert user_relations(conn) == ["notes"]
    with cluster.temporary_database(postgres_server) as other:
        assert cluster.database_name(other) != cluster.database_name(postgres_url)
        with psycopg.connect(other) as conn:
            assert user_relations(conn) == []
            conn.execute("CREATE TABLE other_notes (id int)")
            conn.commit()
        with psycopg.connect(postgres_url) as conn:
            assert user_relations(conn) == ["notes"]
    assert not database_exists(postgres_server, other)


@pytest.fixture
def dropped_afterwards(postgres_server: str) -> Iterator[list[str]]:
    """Database URLs a test puts in this list must be gone after the test's teardown.

    Fixtures end in the reverse order they started: a test requests this one before
    ``postgres_url`` for the check to run after that database's teardown.
    """
    urls: list[str] = []
    yield urls
    assert urls
    assert [url for url in urls if database_exists(postgres_server, url)] == []


def test_postgres_url_is_dropped_after_the_test(
    dropped_afterwards: list[str], postgres_server: str, postgres_url: str
) -> None:
    assert database_exists(postgres_server, postgres_url)
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE notes (id int)")
    dropped_afterwards.append(postgres_url)


def test_temporary_database_is_dropped_with_connections_still_open(postgres_server: str) -> None:
    with cluster.temporary_database(postgres_server) as url:
        conn = psycopg.connect(url)
    try:
        assert not database_exists(postgres_server, url)
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    finally:
        conn.close()


def test_developer_command_prints_the_url_and_cleans_up_on_sigterm(postgres_bindir: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "PICOBOT_PG_BINDIR": str(postgres_bindir),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.pg.cluster"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("PICOBOT_TEST_POSTGRES=postgresql://postgres@127.0.0.1:")
        url = first.strip().split("=", 1)[1]
        data_dir = Path(proc.stdout.readline().split()[2])
        assert data_dir.is_dir()
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert "stopped" in proc.stdout.read()
    finally:
        if proc.poll() is None:  # an assertion failed: still let it stop its cluster
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    assert not data_dir.parent.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5)
