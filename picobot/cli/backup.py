"""``picobot backup``, ``picobot restore`` and ``picobot keys``: copies and keys.

``backup`` writes a consistent database copy (safe while serving) to a directory of the
operator's choice and a key-store copy to ``[keys] backup_dir``, deleting key-store
copies older than ``key_backup_days``. ``restore`` puts a database copy back (the
server stopped). ``keys status`` shows the key store, ``keys new`` prints a fresh
master key, ``keys rotate`` re-wraps every user key under a new one. Each prints text,
or one JSON object with ``--json`` (docs/cli.md).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

from picobot.cli.common import EXIT_OK, Subcommands, add_json_flag, print_json, with_settings
from picobot.config.settings import Settings


def add_backup_commands(
    subparsers: Subcommands, *, parents: Sequence[argparse.ArgumentParser] = ()
) -> None:
    """Register ``backup [--to DIR]``, ``restore FILE --yes`` and ``keys status|new|rotate``."""
    backup_help = "copy the database (while serving) and the key store"
    backup = subparsers.add_parser(
        "backup", help=backup_help, description=backup_help, parents=parents
    )
    backup.add_argument(
        "--to",
        metavar="DIR",
        default="",
        help="where the database copy goes (default: DATA/backups)",
    )
    add_json_flag(backup)
    backup.set_defaults(handler=with_settings(run_backup))
    restore_help = "replace the database with a backup (stop the server first)"
    restore = subparsers.add_parser(
        "restore", help=restore_help, description=restore_help, parents=parents
    )
    restore.add_argument("file", metavar="FILE", help="a database backup from `picobot backup`")
    restore.add_argument(
        "--yes", action="store_true", help="confirm: the current database is replaced"
    )
    add_json_flag(restore)
    restore.set_defaults(handler=with_settings(run_restore))
    keys_help = "the per-user key store: status, new, rotate"
    keys = subparsers.add_parser("keys", help=keys_help, description=keys_help, parents=parents)
    keys.add_argument("action", choices=("status", "new", "rotate"), help="what to do")
    keys.add_argument(
        "--new-key-file",
        metavar="FILE",
        help="rotate: the new master key (from `picobot keys new`); default: a fresh one",
    )
    add_json_flag(keys)
    keys.set_defaults(handler=with_settings(run_keys))


POSTGRES_DUMP = (
    "on PostgreSQL, back the database up with pg_dump --exclude-schema=picobot_keys and"
    " restore it with pg_restore (docs/deploy.md#postgresql)"
)


def run_backup(args: argparse.Namespace, settings: Settings) -> int:
    """Copy the database to ``--to`` and the key store to its backup directory; on
    PostgreSQL only the key store (the database is pg_dump's)."""
    from picobot.store.backup import backup_database, backup_keys, backup_name
    from picobot.store.keys import open_keyring

    now = time.time()
    url = settings.store.resolved_url() or None
    dest: Path | None = None
    size = 0
    ring = open_keyring(settings.data_dir, settings.keys, url=url)
    try:
        if url is None:
            dest_dir = Path(args.to) if args.to else settings.data_dir / "backups"
            dest_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            dest = dest_dir / backup_name(now)
            size = backup_database(settings.db_path, dest)
        keys, pruned = backup_keys(
            ring, settings.keys.backup_path(settings.data_dir), now, settings.keys.key_backup_days
        )
    finally:
        ring.close()
    if args.json:
        print_json(
            {
                "database": None if dest is None else str(dest),
                "bytes": size,
                "keys": str(keys),
                "pruned": [str(p) for p in pruned],
            }
        )
        return EXIT_OK
    if dest is None:
        print(f"database: {POSTGRES_DUMP}")
    else:
        print(f"database: {dest} ({size:,} bytes)")
    print(f"key store: {keys} (kept {settings.keys.key_backup_days} days)")
    for path in pruned:
        print(f"deleted old key-store copy: {path}")
    return EXIT_OK


def run_restore(args: argparse.Namespace, settings: Settings) -> int:
    """Replace the database with a backup; refused without ``--yes``."""
    from picobot.errors import PicobotError
    from picobot.store.backup import restore_database

    if settings.store.resolved_url():
        raise PicobotError(f"restore copies a SQLite file back; {POSTGRES_DUMP}")
    if not args.yes:
        raise PicobotError(
            f"restore replaces {settings.db_path} with {args.file}: stop the server, then"
            " run again with --yes"
        )
    size = restore_database(Path(args.file), settings.db_path, _key_store_id(settings))
    erased = asyncio.run(_drop_users_without_keys(settings))
    if args.json:
        print_json(
            {"database": str(settings.db_path), "bytes": size, "from": args.file, "erased": erased}
        )
        return EXIT_OK
    print(f"restored {settings.db_path} from {args.file} ({size:,} bytes)")
    print(f"deleted the rows of {len(erased)} user(s) purged since the backup (keys gone)")
    return EXIT_OK


def _key_store_id(settings: Settings) -> str:
    """The id of the data directory's key store (opened with the configured master key)."""
    from picobot.store.keys import open_keyring

    ring = open_keyring(settings.data_dir, settings.keys)
    try:
        return ring.store_id
    finally:
        ring.close()


async def _drop_users_without_keys(settings: Settings) -> list[str]:
    """Delete what the restored database holds of users whose key is gone; their ids."""
    from picobot.runtime import open_database
    from picobot.store.erasure.purge import PurgeStore
    from picobot.store.keys.orphans import users_without_keys

    async with open_database(settings) as db:
        users = await users_without_keys(db)
        for user in users:
            await PurgeStore(db).delete_user(user)
        return users


def run_keys(args: argparse.Namespace, settings: Settings) -> int:
    """``keys status``, ``keys new`` or ``keys rotate``."""
    from picobot.store.keys import open_keyring
    from picobot.store.keys.master import encode_key, new_key
    from picobot.store.keys.rotation import rotate_master_key

    if args.action == "new":
        key = encode_key(new_key())
        if args.json:
            print_json({"master_key": key})
        else:
            print(key)
        return EXIT_OK
    if args.action == "rotate":
        new_file = Path(args.new_key_file) if args.new_key_file else None
        done = rotate_master_key(settings.data_dir, settings.keys, new_file)
        where = (
            str(done.key_file) if done.key_file else "PICOBOT_MASTER_KEY (set it to the new key)"
        )
        if args.json:
            print_json({"rewrapped": done.rewrapped, "master_key": where})
        else:
            print(f"re-wrapped {done.rewrapped} user keys; the master key is now in {where}")
        return EXIT_OK
    ring = open_keyring(settings.data_dir, settings.keys)
    try:
        info = ring.info()
    finally:
        ring.close()
    if args.json:
        print_json(
            {
                "key_store": str(info.path),
                "store_id": info.store_id,
                "user_keys": info.user_keys,
                "master_key": info.master_source,
            }
        )
        return EXIT_OK
    print(f"key store: {info.path} (id {info.store_id})")
    print(f"user keys: {info.user_keys}")
    print(f"master key: {info.master_source}")
    return EXIT_OK
