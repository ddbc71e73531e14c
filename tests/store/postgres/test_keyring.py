"""The key store on PostgreSQL: one set of user keys for every instance."""

from __future__ import annotations

import base64
import secrets
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from picobot.config.keys import KeySettings
from picobot.errors import ConfigError
from picobot.store.keys import open_keyring
from picobot.store.keys.keyring import KeyRing
from picobot.store.keys.sealing import ERASED, Sealer
from picobot.store.postgres.keyring import PostgresKeyRing

MASTER = secrets.token_bytes(32)


def env(master: bytes = MASTER) -> dict[str, str]:
    return {"PICOBOT_MASTER_KEY": base64.b64encode(master).decode()}


def ring(tmp_path: Path, url: str, name: str, master: bytes = MASTER) -> KeyRing:
    """One instance's ring: its own data directory, the shared database."""
    return open_keyring(tmp_path / name, KeySettings(), env(master), url=url)


def test_a_key_made_on_one_instance_opens_on_another(tmp_path: Path, postgres_url: str) -> None:
    a, b = ring(tmp_path, postgres_url, "a"), ring(tmp_path, postgres_url, "b")
    try:
        assert isinstance(a, PostgresKeyRing) and a.store_id == b.store_id
        sealed = Sealer(a).seal("alice", "my dentist is Doctor Quokkaberg")
        assert Sealer(b).open(sealed) == "my dentist is Doctor Quokkaberg"
        assert not (tmp_path / "a" / "keys.db").exists()  # nothing in the data directory
    finally:
        a.close()
        b.close()


def test_a_user_forgotten_on_one_instance_is_forgotten_on_every_other(
    tmp_path: Path, postgres_url: str
) -> None:
    a, b = ring(tmp_path, postgres_url, "a"), ring(tmp_path, postgres_url, "b")
    try:
        sealed = Sealer(a).seal("alice", "a secret")
        assert Sealer(b).open(sealed) == "a secret"  # b has the key cached now
        assert a.forget("alice")
        assert b.refresh()  # the version moved: b drops its cache
        assert Sealer(b).open(sealed) == ERASED
        assert not b.refresh()  # nothing changed since
    finally:
        a.close()
        b.close()


def test_another_master_key_is_refused(tmp_path: Path, postgres_url: str) -> None:
    ring(tmp_path, postgres_url, "a").close()
    with pytest.raises(ConfigError, match="does not open the key store"):
        ring(tmp_path, postgres_url, "b", secrets.token_bytes(32))


def test_instances_starting_together_make_one_store(tmp_path: Path, postgres_url: str) -> None:
    with ThreadPoolExecutor(4) as pool:
        rings = list(pool.map(lambda n: ring(tmp_path, postgres_url, f"i{n}"), range(4)))
    try:
        assert len({r.store_id for r in rings}) == 1
    finally:
        for r in rings:
            r.close()


def test_the_keys_live_in_their_own_schema(tmp_path: Path, postgres_url: str) -> None:
    keys = ring(tmp_path, postgres_url, "a")
    try:
        Sealer(keys).seal("alice", "x")
        with psycopg.connect(postgres_url) as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
                " ORDER BY 1",
                ("picobot_keys",),
            ).fetchall()
            (count,) = conn.execute("SELECT COUNT(*) FROM picobot_keys.user_keys").fetchone() or (
                0,
            )
        assert [t[0] for t in tables] == ["meta", "user_keys", "version"]
        assert count == 1
    finally:
        keys.close()


def test_a_backup_is_a_key_store_file_that_opens_the_data(
    tmp_path: Path, postgres_url: str
) -> None:
    keys = ring(tmp_path, postgres_url, "a")
    try:
        sealed = Sealer(keys).seal("alice", "kept in the backup")
        keys.backup_to(tmp_path / "backup.db")
    finally:
        keys.close()
    assert (tmp_path / "backup.db").stat().st_mode & 0o777 == 0o600
    copy = KeyRing.open(tmp_path / "backup.db", MASTER, "test")
    try:
        assert copy.store_id == keys.store_id
        assert Sealer(copy).open(sealed) == "kept in the backup"
    finally:
        copy.close()
    with sqlite3.connect(tmp_path / "backup.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM user_keys").fetchone() == (1,)
