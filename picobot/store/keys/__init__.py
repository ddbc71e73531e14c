"""Per-user data keys: the master key, the key store, and opening them together.

See :mod:`.keyring` for the store and :mod:`.master` for the master key's sources.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from picobot.config.keys import MASTER_KEY_ENV, KeySettings
from picobot.errors import ConfigError, StoreUnavailable
from picobot.store.keys.keyring import KEY_STORE_FILE, KeyRing
from picobot.store.keys.master import (
    PENDING_SUFFIX,
    fsync_path,
    key_file_path,
    load_master_key,
    read_key_file,
)

log = logging.getLogger(__name__)


def open_keyring(
    data_dir: Path,
    settings: KeySettings,
    environ: Mapping[str, str] | None = None,
    *,
    url: str | None = None,
) -> KeyRing:
    """Open the data directory's key store with the configured master key.

    A missing or wrong master key is a ConfigError that says which source was used; a
    missing key file next to an existing key store is never replaced by a new key. A
    rotation interrupted after the store was re-wrapped (``master.key.new`` present and
    the only key that opens it) is finished here. ``url``: the key store is the one in
    that PostgreSQL database (:mod:`picobot.store.postgres.keyring`), shared by every
    instance; the master key still comes from this instance's file or environment, and
    must be the same on every instance.
    """
    env = os.environ if environ is None else environ
    if url is not None:
        from picobot.store.postgres.keyring import PostgresKeyRing

        master = load_master_key(
            env.get(MASTER_KEY_ENV),
            key_file_path(data_dir, settings.master_key_file),
            default_file=not settings.master_key_file,
            may_create=True,
        )
        return PostgresKeyRing.open_url(url, master.key, master.source)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreUnavailable(
            f"cannot create data directory {data_dir}: {exc.strerror or exc}"
        ) from None
    store = data_dir / KEY_STORE_FILE
    key_file = key_file_path(data_dir, settings.master_key_file)
    exists = store.exists()
    default_file = not settings.master_key_file
    if exists and not env.get(MASTER_KEY_ENV) and not key_file.exists():
        raise ConfigError(
            f"the key store {store} exists but its master key file {key_file} is missing:"
            " restore the file (or set PICOBOT_MASTER_KEY); PicoBot does not make a new"
            " key over existing keys (see docs/privacy.md#per-user-keys)"
        )
    master = load_master_key(
        env.get(MASTER_KEY_ENV), key_file, default_file=default_file, may_create=not exists
    )
    try:
        return KeyRing.open(store, master.key, master.source)
    except ConfigError:
        pending = key_file.with_name(key_file.name + PENDING_SUFFIX)
        if master.path is None or not pending.exists():
            raise
        new = read_key_file(pending)
        ring = KeyRing.open(store, new.key, str(key_file))
        os.replace(pending, key_file)
        fsync_path(key_file.parent)
        log.warning(
            "finished an interrupted master key rotation: %s now holds the new key", key_file
        )
        return ring
