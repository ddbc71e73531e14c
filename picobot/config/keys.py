"""The ``[keys]`` section: where the master key comes from and how long key backups live.

Every user's data key is kept in the key store (``<data dir>/keys.db``), wrapped by one
master key. The master key comes from the ``PICOBOT_MASTER_KEY`` variable when it is
set, else from ``master_key_file`` when that is set (a secrets file), else from
``<data dir>/master.key``, created with mode 0600 on first run. See
docs/privacy.md#per-user-keys.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from picobot.config.sections import Section
from picobot.config.sources import MASTER_KEY_ENV as MASTER_KEY_ENV


class KeySettings(Section):
    """The master key's source and the key store's backups (see docs/privacy.md)."""

    master_key_file: str = ""
    """A file holding the master key (e.g. a mounted secret), used when PICOBOT_MASTER_KEY
    is not set. Empty: <data dir>/master.key, created with mode 0600 on first run."""
    backup_dir: str = ""
    """Where `picobot backup` keeps copies of the key store. Empty: <data dir>/key-backups.
    Keep it apart from the database backups: a database backup is only readable with a
    key-store copy that still holds its users' keys."""
    key_backup_days: int = Field(default=7, ge=0, le=3650)
    """Days a key-store backup is kept. Once a purge is older than this, no key-store
    backup holds the purged user's key, so no database backup can reveal them. 0: each
    backup replaces the previous one."""

    def backup_path(self, data_dir: Path) -> Path:
        """Where key-store copies are kept: ``backup_dir``, else ``<data dir>/key-backups``."""
        return Path(self.backup_dir) if self.backup_dir else data_dir / "key-backups"
