"""The key store: one data key per user, wrapped by the master key, in its own file.

``<data dir>/keys.db`` is a small SQLite file apart from the conversation database, so a
copy of the database alone reveals nothing once the key store has forgotten a user:
purging a user deletes their key row (:meth:`KeyRing.forget`), and every text sealed
with it (:mod:`.sealing`) is unreadable from then on, in the live files and in every
backup. Keys are 256-bit AES-GCM keys from the OS CSPRNG; each is stored wrapped
(AES-GCM under the master key, bound to its key id), never in clear. The file runs
with ``secure_delete`` and a rollback journal, so a forgotten key leaves no copy in it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Self

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from picobot.errors import ConfigError

KEY_STORE_FILE = "keys.db"
SHARED = ""
"""The user id of the shared key, which seals rows that belong to no one user."""
NONCE_BYTES = 12
_CHECK_TEXT = b"picobot key store"
_CACHE_SIZE = 4096

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS user_keys (
    kid INTEGER PRIMARY KEY,
    user_id TEXT NOT NULL UNIQUE,
    wrapped BLOB NOT NULL,
    created_at REAL NOT NULL
);
"""


class KeyConnection(Protocol):
    """What the ring needs of its connection: ``sqlite3``'s, or one to PostgreSQL."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Any:
        """Run one statement; a cursor."""

    def close(self) -> None:
        """Close the connection."""


def _kid_aad(kid: int) -> bytes:
    return b"picobot-user-key:" + kid.to_bytes(8, "big")


def _wrap(master: AESGCM, key: bytes, aad: bytes) -> bytes:
    nonce = secrets.token_bytes(NONCE_BYTES)
    return nonce + master.encrypt(nonce, key, aad)


def _unwrap(master: AESGCM, wrapped: bytes, aad: bytes) -> bytes:
    return master.decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], aad)


@dataclass(frozen=True)
class UserKey:
    """One user's key, unwrapped: its id, its cipher, and the key of its index terms."""

    kid: int
    aead: AESGCM
    terms: bytes
    """HMAC key of the user's recall-index terms, derived from the data key."""

    @classmethod
    def of(cls, kid: int, key: bytes) -> UserKey:
        """The cipher and term key of the raw data key ``key``."""
        terms = hmac.digest(key, b"picobot-index-terms", hashlib.sha256)
        return cls(kid, AESGCM(key), terms)


@dataclass(frozen=True)
class KeyStoreInfo:
    """What ``picobot keys status`` shows: never a key."""

    path: Path | str
    store_id: str
    user_keys: int
    master_source: str


class KeyRing:
    """The open key store; safe to share between threads (one lock around the file).

    Unwrapped keys are cached (at most a few thousand) so sealing a message does not
    read the file; :meth:`forget` drops a user's key from the cache and the file at once.

    Several processes may share the file (two servers, a server and ``picobot purge``):
    a key another process deleted must not stay usable here. The cache is trusted only
    while SQLite's ``data_version`` of this connection is unchanged (it moves when another
    connection commits to the file): :meth:`key` checks it before every seal, and
    :meth:`refresh`, which the database calls in its threads as each batch of reads or
    writes begins, before every open. Another process's commit (a new user's key, a
    purge) empties the cache; keys are read again from the file as they are used.
    """

    BEGIN = "BEGIN IMMEDIATE"
    """How a change of the keys begins: with the file's write lock."""
    VERSION = "PRAGMA data_version"
    """What reads the number that moves when another connection commits."""

    def __init__(
        self, conn: KeyConnection, path: Path | str, master: bytes, source: str, store_id: str
    ) -> None:
        self._conn = conn
        self.path = path
        self._master = AESGCM(master)
        self.master_source = source
        self.store_id = store_id
        self._lock = threading.RLock()
        self._by_kid: OrderedDict[int, UserKey] = OrderedDict()
        self._kid_of: OrderedDict[str, int] = OrderedDict()
        self._closed = False
        self._version = self._data_version()

    @classmethod
    def open(cls, path: Path, master: bytes, source: str) -> KeyRing:
        """Open ``path`` (created, mode 0600, if missing) and check the master key opens it.

        A wrong master key is a ConfigError naming ``source``: nothing is written then.
        """
        created = not path.exists()
        if created:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        try:
            conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA secure_delete=ON")
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(_SCHEMA)
            rows = dict(conn.execute("SELECT name, value FROM meta").fetchall())
        except sqlite3.Error as exc:
            raise ConfigError(f"key store {path} cannot be opened: {exc}") from None
        return cls.checked(conn, rows, path, master, source)

    @classmethod
    def checked(
        cls,
        conn: KeyConnection,
        meta: dict[str, Any],
        path: Path | str,
        master: bytes,
        source: str,
    ) -> Self:
        """The ring over ``conn`` (its ``meta`` rows read), once the master key is known
        to open it; a new store gets its id and master key check. Closes ``conn`` and
        raises ConfigError for a wrong key or a damaged store."""
        aead = AESGCM(master)
        if "check" not in meta:
            if conn.execute("SELECT 1 FROM user_keys LIMIT 1").fetchone() is not None:
                conn.close()
                raise ConfigError(f"key store {path} is damaged: its master key check is missing")
            store_id = secrets.token_hex(8)
            check = _wrap(aead, _CHECK_TEXT, b"picobot-check:" + store_id.encode())
            with _transaction(conn, cls.BEGIN):
                conn.execute("INSERT INTO meta VALUES ('store_id', ?)", (store_id.encode(),))
                conn.execute("INSERT INTO meta VALUES ('check', ?)", (check,))
            return cls(conn, path, master, source, store_id)
        raw_id = meta["store_id"]
        store_id = bytes(raw_id).decode() if not isinstance(raw_id, str) else raw_id
        try:
            _unwrap(aead, bytes(meta["check"]), b"picobot-check:" + store_id.encode())
        except InvalidTag:
            conn.close()
            raise ConfigError(
                f"the master key from {source} does not open the key store {path}: it is"
                " not the key this store was made with (see docs/privacy.md#per-user-keys)"
            ) from None
        return cls(conn, path, master, source, store_id)

    def close(self) -> None:
        """Close the file; the cached keys are dropped."""
        with self._lock:
            self._by_kid.clear()
            self._kid_of.clear()
            self._closed = True
            self._conn.close()

    def refresh(self) -> bool:
        """Drop every cached key if another process committed to the file since the last
        look (a key it deleted must not open anything here); whether it did.

        One ``PRAGMA`` (a few microseconds). The database calls it in its reader and
        writer threads as each batch of reads or writes begins, so a read or write that
        began after another process deleted a key never opens text with that key.
        """
        with self._lock:
            if self._closed:  # a closed ring caches nothing
                return False
            version = self._data_version()
            if version == self._version:
                return False
            self._version = version
            self._by_kid.clear()
            self._kid_of.clear()
            return True

    def key(self, user_id: str) -> UserKey:
        """``user_id``'s key, made and stored durably on first use.

        Checks the file for other processes' changes first (:meth:`refresh`): nothing is
        ever sealed with a key another process deleted, which would read as erased.
        """
        with self._lock:
            self.refresh()
            found = self.existing(user_id)
            if found is not None:
                return found
            kid = secrets.randbits(62) + 1
            key = AESGCM.generate_key(bit_length=256)
            with self._transaction():
                self._conn.execute(
                    "INSERT INTO user_keys (kid, user_id, wrapped, created_at) VALUES (?, ?, ?, ?)",
                    (kid, user_id, _wrap(self._master, key, _kid_aad(kid)), time.time()),
                )
            return self._remember(user_id, UserKey.of(kid, key))

    def existing(self, user_id: str) -> UserKey | None:
        """``user_id``'s key if they have one (never makes one)."""
        with self._lock:
            kid = self._kid_of.get(user_id)
            cached = None if kid is None else self._by_kid.get(kid)
            if cached is not None:
                self._kid_of.move_to_end(user_id)
                return cached
            row = self._conn.execute(
                "SELECT kid, wrapped FROM user_keys WHERE user_id = ?", (user_id,)
            ).fetchone()
            if row is None:
                return None
            kid = int(row[0])
            key = _unwrap(self._master, bytes(row[1]), _kid_aad(kid))
            return self._remember(user_id, UserKey.of(kid, key))

    def by_kid(self, kid: int) -> UserKey | None:
        """The key with id ``kid``, or None when it was forgotten (or never existed)."""
        # The hot path (every sealed value read): a dict lookup needs no lock, and a
        # key's place in the eviction order is refreshed when it is used to seal.
        cached = self._by_kid.get(kid)
        if cached is not None:
            return cached
        with self._lock:
            row = self._conn.execute(
                "SELECT user_id, wrapped FROM user_keys WHERE kid = ?", (kid,)
            ).fetchone()
            if row is None:
                return None
            key = _unwrap(self._master, bytes(row[1]), _kid_aad(kid))
            return self._remember(str(row[0]), UserKey.of(kid, key))

    def forget(self, user_id: str) -> bool:
        """Delete ``user_id``'s key from the file and the cache; whether there was one.

        From the moment this returns, nothing sealed with the key can be read again.
        """
        with self._lock:
            self._kid_of.pop(user_id, None)
            # The two caches evict apart: the key's id comes from the file, not the cache.
            for (kid,) in self._conn.execute(
                "SELECT kid FROM user_keys WHERE user_id = ?", (user_id,)
            ).fetchall():
                self._by_kid.pop(int(kid), None)
            with self._transaction():
                cur = self._conn.execute("DELETE FROM user_keys WHERE user_id = ?", (user_id,))
            return bool(cur.rowcount > 0)

    def compact(self) -> None:
        """Leave no copy of a forgotten key in the store's files. The file runs with
        ``secure_delete``, which zeroes a deleted key as it goes: nothing to do here
        (see :class:`picobot.store.postgres.keyring.PostgresKeyRing`)."""

    def known_kids(self) -> set[int]:
        """The ids of every key the store holds (to tell which sealed rows are erased)."""
        with self._lock:
            return {int(row[0]) for row in self._conn.execute("SELECT kid FROM user_keys")}

    def rotate(self, new_master: bytes) -> int:
        """Re-wrap every key under ``new_master`` in one transaction; the count re-wrapped.

        The data is not touched: only the wrapping changes. After this, only
        ``new_master`` opens the store.
        """
        with self._lock:
            new = AESGCM(new_master)
            rows = self._conn.execute("SELECT kid, wrapped FROM user_keys").fetchall()
            with self._transaction():
                for kid, wrapped in rows:
                    key = _unwrap(self._master, bytes(wrapped), _kid_aad(int(kid)))
                    self._conn.execute(
                        "UPDATE user_keys SET wrapped = ? WHERE kid = ?",
                        (_wrap(new, key, _kid_aad(int(kid))), kid),
                    )
                check = _wrap(new, _CHECK_TEXT, b"picobot-check:" + self.store_id.encode())
                self._conn.execute("UPDATE meta SET value = ? WHERE name = 'check'", (check,))
            self._master = new
            return len(rows)

    @staticmethod
    def create_file(dest: Path) -> sqlite3.Connection:
        """A new key store file ``dest`` (mode 0600; refused if it exists) with its tables,
        for a copy of the keys."""
        os.close(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        target = sqlite3.connect(str(dest))
        target.executescript(_SCHEMA)
        return target

    def backup_to(self, dest: Path) -> None:
        """Copy the store, consistently, to a new file ``dest`` (mode 0600)."""
        target = self.create_file(dest)
        try:
            with self._lock:
                assert isinstance(self._conn, sqlite3.Connection)  # see PostgresKeyRing
                self._conn.backup(target)
        finally:
            target.close()

    def info(self) -> KeyStoreInfo:
        """The store's path, id and key count, and where the master key came from."""
        with self._lock:
            (count,) = self._conn.execute("SELECT COUNT(*) FROM user_keys").fetchone()
        return KeyStoreInfo(self.path, self.store_id, int(count), self.master_source)

    def _data_version(self) -> int:
        """A number that moves when another connection commits a change of the keys."""
        return int(self._conn.execute(self.VERSION).fetchone()[0])

    def _transaction(self) -> AbstractContextManager[None]:
        return _transaction(self._conn, self.BEGIN)

    def _remember(self, user_id: str, key: UserKey) -> UserKey:
        self._kid_of[user_id] = key.kid
        self._by_kid[key.kid] = key
        while len(self._by_kid) > _CACHE_SIZE:
            self._by_kid.popitem(last=False)
        while len(self._kid_of) > _CACHE_SIZE:
            self._kid_of.popitem(last=False)
        return key


@contextmanager
def _transaction(conn: KeyConnection, begin: str) -> Iterator[None]:
    conn.execute(begin)
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
