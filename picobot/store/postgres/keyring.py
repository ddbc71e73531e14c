"""The key store on PostgreSQL: every instance shares one set of user keys.

The same :class:`~picobot.store.keys.keyring.KeyRing` (wrapped keys, the master key
check, the cache), its tables in the schema :data:`SCHEMA` of the store's database
rather than in a file of one machine's data directory: a key made on one instance
opens on every other, and a user purged on one is forgotten on all. A statement-level
trigger moves a version counter on every change of the keys; each instance reads it as
each batch of reads or writes begins (:meth:`KeyRing.refresh`), where SQLite's
``data_version`` served, so a key deleted elsewhere never opens anything afterwards.

Keep :data:`SCHEMA` out of the conversation database's backups (``pg_dump
--exclude-schema=picobot_keys``) and back it up on its own, as the key store file is on
SQLite: a backup that holds both brings a forgotten user's text back with the master key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from picobot.errors import ConfigError
from picobot.store.keys.keyring import KeyRing
from picobot.store.keys.sealing import Sealer
from picobot.store.postgres.connect import CONNECT_TIMEOUT_SECS, redacted
from picobot.store.postgres.driver import PgConnection

SCHEMA = "picobot_keys"
"""The PostgreSQL schema that holds the key store's tables."""
KEYS_LOCK = 0x7069636F6B6579
"""The advisory lock under which the store is made and checked (instances starting at once)."""

_DDL = (
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BYTEA NOT NULL)",
    "CREATE TABLE IF NOT EXISTS user_keys (kid BIGINT PRIMARY KEY, user_id TEXT NOT NULL"
    " UNIQUE, wrapped BYTEA NOT NULL, created_at DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS version (id INTEGER PRIMARY KEY CHECK (id = 1),"
    " value BIGINT NOT NULL)",
    "INSERT INTO version VALUES (1, 0) ON CONFLICT DO NOTHING",
    "CREATE OR REPLACE FUNCTION keys_changed() RETURNS trigger LANGUAGE plpgsql AS"
    " $$ BEGIN UPDATE version SET value = value + 1 WHERE id = 1; RETURN NULL; END $$",
    "CREATE OR REPLACE TRIGGER user_keys_changed AFTER INSERT OR UPDATE OR DELETE"
    " ON user_keys FOR EACH STATEMENT EXECUTE FUNCTION keys_changed()",
)


def connect_keys(url: str) -> psycopg.Connection[Any]:
    """An autocommit connection to the database at ``url`` whose statements name the
    key store's tables (search path :data:`SCHEMA`). Raises psycopg.Error."""
    return psycopg.connect(
        url,
        autocommit=True,
        connect_timeout=CONNECT_TIMEOUT_SECS,
        application_name="picobot-keys",
        options=f"-c search_path={SCHEMA}",
    )


def create_key_tables(raw: psycopg.Connection[Any]) -> None:
    """Make the key store's schema, tables and version trigger where missing, in one
    transaction (a savepoint of an open one); ``raw`` comes from :func:`connect_keys`."""
    with raw.transaction():
        for statement in _DDL:
            raw.execute(statement)


class PostgresKeyRing(KeyRing):
    """A :class:`KeyRing` whose tables are in the schema :data:`SCHEMA`."""

    BEGIN = "BEGIN"
    VERSION = "SELECT value FROM version WHERE id = 1"

    @classmethod
    def open_url(cls, url: str, master: bytes, source: str) -> PostgresKeyRing:
        """Open (making its tables if missing) the key store in the database at ``url``
        and check ``master`` opens it. Raises ConfigError."""
        where = f"{redacted(url)} (schema {SCHEMA})"
        try:
            raw = connect_keys(url)
        except psycopg.Error as exc:
            raise ConfigError(f"key store {where} cannot be opened: {exc}") from None
        try:
            # Held until the store has its id and check: instances starting together
            # make one store, and each checks its master key against it.
            raw.execute("SELECT pg_advisory_lock(%s)", (KEYS_LOCK,))
            create_key_tables(raw)
            meta: dict[str, Any] = dict(raw.execute("SELECT name, value FROM meta").fetchall())
            return cls.checked(PgConnection(raw, Sealer()), meta, where, master, source)
        except psycopg.Error as exc:
            raw.close()
            raise ConfigError(f"key store {where} cannot be opened: {exc}") from None
        finally:
            if not raw.closed:
                raw.execute("SELECT pg_advisory_unlock(%s)", (KEYS_LOCK,))

    def compact(self) -> None:
        """Rewrite the keys' table (``VACUUM FULL``): a deleted key's row version stays
        in the table's file until then, and with the master key it would open what the
        purged user sealed. The table is small; the rewrite takes milliseconds, during
        which other instances' key reads wait."""
        with self._lock:
            self._conn.execute("VACUUM FULL user_keys")

    def backup_to(self, dest: Path) -> None:
        """Copy the keys, consistently, to a new key store file ``dest`` (mode 0600),
        the format of the SQLite key store."""
        with self._lock:
            meta = self._conn.execute("SELECT name, value FROM meta").fetchall()
            keys = self._conn.execute(
                "SELECT kid, user_id, wrapped, created_at FROM user_keys"
            ).fetchall()
        copy = KeyRing.create_file(dest)
        try:
            copy.executemany("INSERT INTO meta VALUES (?, ?)", [tuple(r) for r in meta])
            copy.executemany("INSERT INTO user_keys VALUES (?, ?, ?, ?)", [tuple(r) for r in keys])
            copy.commit()
        finally:
            copy.close()
