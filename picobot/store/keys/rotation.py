"""Rotating the master key: every user key re-wrapped, no data re-encrypted.

Crash-safe in three steps: the new key is written beside the key file
(``master.key.new``, 0600, fsynced); the key store is re-wrapped in one transaction;
the new file replaces the old. A kill between the last two is finished by the next
start (:func:`picobot.store.keys.open_keyring` tries ``master.key.new``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from picobot.config.keys import KeySettings
from picobot.errors import ConfigError
from picobot.store.keys import open_keyring
from picobot.store.keys.master import (
    PENDING_SUFFIX,
    fsync_path,
    key_file_path,
    new_key,
    read_key_file,
    write_key_file,
)


@dataclass(frozen=True)
class Rotation:
    """What a rotation did: how many keys, and where the new master key now is."""

    rewrapped: int
    key_file: Path | None
    """The file that now holds the new key; None when it came from the environment."""


def rotate_master_key(
    data_dir: Path,
    settings: KeySettings,
    new_key_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Rotation:
    """Re-wrap the key store under a new master key (made here, or read from ``new_key_file``).

    With the key in a file (PicoBot's or ``master_key_file``), that file ends up holding
    the new key. With ``PICOBOT_MASTER_KEY``, ``new_key_file`` is required and the
    operator sets the variable to its content before the next start.
    """
    ring = open_keyring(data_dir, settings, environ)
    try:
        from_env = ring.master_source == "PICOBOT_MASTER_KEY"
        if from_env and new_key_file is None:
            raise ConfigError(
                "the master key comes from PICOBOT_MASTER_KEY: give the new key with"
                " --new-key-file (make one with `picobot keys new`), then set the variable"
                " to it before the next start"
            )
        new = read_key_file(new_key_file).key if new_key_file is not None else new_key()
        if from_env:
            return Rotation(ring.rotate(new), None)
        key_file = key_file_path(data_dir, settings.master_key_file)
        pending = key_file.with_name(key_file.name + PENDING_SUFFIX)
        if pending.exists():
            pending.unlink()
        write_key_file(pending, new)
        count = ring.rotate(new)
        os.replace(pending, key_file)
        fsync_path(key_file.parent)
        return Rotation(count, key_file)
    finally:
        ring.close()
