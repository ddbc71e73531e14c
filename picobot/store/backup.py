"""Backups of the database and of the key store, and restoring a database backup.

A database backup is a consistent copy taken with SQLite's online backup API, safe
while ``picobot serve`` writes (it reads one snapshot). Its users' texts are sealed
with their keys, which live only in the key store; key-store copies are kept apart
(``[keys] backup_dir``) and deleted after ``key_backup_days``. So once a purge is older
than that, no copy of the key store holds the purged user's key, and no database
backup, however old, can reveal them.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from picobot.errors import StoreUnavailable
from picobot.store.keys.keyring import KeyRing
from picobot.store.keys.master import fsync_path

KEY_BACKUP_PREFIX = "keys-"
_STAMP = "%Y%m%dT%H%M%SZ"
DAY_SECS = 86_400


@dataclass(frozen=True)
class BackupResult:
    """The files one backup wrote and the key-store copies it deleted."""

    database: Path
    database_bytes: int
    keys: Path
    pruned: list[Path]


def stamp(at: float) -> str:
    """A UTC time as backup files are named (sortable, no ':')."""
    return datetime.fromtimestamp(at, UTC).strftime(_STAMP)


def backup_database(source: Path, dest: Path) -> int:
    """Copy the database ``source`` to the new file ``dest`` (0600); its size in bytes."""
    if not source.exists():
        raise StoreUnavailable(f"database {source} does not exist: nothing to back up")
    src = sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)
    try:
        _copy(src, dest)
    except sqlite3.Error as exc:
        dest.unlink(missing_ok=True)
        raise StoreUnavailable(f"backup of {source} failed: {exc}") from None
    finally:
        src.close()
    return dest.stat().st_size


def _copy(src: sqlite3.Connection, dest: Path) -> None:
    """Copy the open database ``src`` into the new file ``dest`` (0600), durably.

    One snapshot (SQLite's online backup API), written as a self-contained file: no
    WAL beside it.
    """
    os.close(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    target = sqlite3.connect(str(dest))
    try:
        src.backup(target)
        target.execute("PRAGMA journal_mode=DELETE")
    finally:
        target.close()
    fsync_path(dest)


def backup_keys(
    ring: KeyRing, backup_dir: Path, now: float, keep_days: int
) -> tuple[Path, list[Path]]:
    """Copy the key store into ``backup_dir``; then delete copies past ``keep_days``.

    Returns the new copy and the deleted ones. With ``keep_days`` 0 every older copy goes.
    """
    backup_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    dest = backup_dir / f"{KEY_BACKUP_PREFIX}{stamp(now)}.db"
    if dest.exists():
        raise StoreUnavailable(f"{dest} already exists: one key-store backup per second")
    ring.backup_to(dest)
    fsync_path(dest)
    pruned = prune_key_backups(backup_dir, now, keep_days, keep={dest})
    fsync_path(backup_dir)
    return dest, pruned


def prune_key_backups(
    backup_dir: Path, now: float, keep_days: int, keep: set[Path] | None = None
) -> list[Path]:
    """Delete key-store copies in ``backup_dir`` taken more than ``keep_days`` ago."""
    if not backup_dir.is_dir():
        return []
    cutoff = now - keep_days * DAY_SECS
    pruned = []
    for path in sorted(backup_dir.glob(f"{KEY_BACKUP_PREFIX}*.db")):
        taken = key_backup_time(path)
        if path in (keep or set()) or taken is None:
            continue
        if taken < cutoff:
            path.unlink()
            pruned.append(path)
    return pruned


def key_backup_time(path: Path) -> float | None:
    """When a key-store copy was taken, from its name; None if not one of ours."""
    text = path.stem.removeprefix(KEY_BACKUP_PREFIX)
    try:
        return datetime.strptime(text, _STAMP).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def restore_database(backup: Path, live: Path, key_store: str | None = None) -> int:
    """Put the database backup ``backup`` in place of ``live``; its size in bytes.

    The server must be stopped. The backup is checked first (a readable SQLite file
    holding PicoBot's schema, integrity ok, sealed under ``key_store`` when it is
    sealed at all), copied beside ``live`` and renamed over it, so an interruption or
    a refusal leaves either the old database or the restored one.
    """
    try:
        src = sqlite3.connect(f"{backup.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"cannot open backup {backup}: {exc}") from None
    tmp = live.with_name(live.name + ".restoring")
    try:
        try:
            (ok,) = src.execute("PRAGMA quick_check").fetchone()
            schema = src.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_migrations'"
            ).fetchone()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"{backup} is not a PicoBot database backup: {exc}") from None
        if schema is None:
            raise StoreUnavailable(f"{backup} is not a PicoBot database backup (no schema)")
        if ok != "ok":
            raise StoreUnavailable(f"backup {backup} is damaged: {ok}")
        _check_key_store(src, backup, key_store)
        tmp.unlink(missing_ok=True)
        _copy(src, tmp)
    finally:
        src.close()
    for suffix in ("-wal", "-shm"):
        live.with_name(live.name + suffix).unlink(missing_ok=True)
    os.replace(tmp, live)
    fsync_path(live.parent)
    return live.stat().st_size


def _check_key_store(src: sqlite3.Connection, backup: Path, key_store: str | None) -> None:
    """Refuse a backup sealed under another key store than ``key_store``.

    Restored, it would be refused at every start (every text would read as erased),
    and the database it replaced would be gone. A backup from before per-user keys
    (no ``store_meta``, or nothing recorded) is sealed by ``picobot migrate``.
    """
    try:
        row = src.execute("SELECT value FROM store_meta WHERE name = 'key_store'").fetchone()
    except sqlite3.OperationalError:  # no store_meta: a schema from before per-user keys
        return
    if row is None or key_store is None or str(row[0]) == key_store:
        return
    raise StoreUnavailable(
        f"backup {backup} is sealed with key store {row[0]}, but this data directory's"
        f" key store is {key_store}: restore it together with its own key store copy"
        " (see docs/privacy.md#backups-that-forget); nothing was replaced"
    )


def backup_name(now: float | None = None) -> str:
    """The file name of a database backup taken at ``now``."""
    return f"picobot-{stamp(time.time() if now is None else now)}.db"
