"""``picobot memories``: an operator's view of one user's memories, from the host.

Listing only reads. ``--set`` and ``--delete`` change the store and are logged like
the same change through the admin API: the actor (``cli:<user>``), the user and the
count, never the memory's key or content (both are user data that a purge erases from
the database but could not erase from a log file).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from picobot.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    Subcommands,
    add_json_flag,
    fail,
    print_json,
    record_json,
)
from picobot.cli.operator import command_logging, operator_id
from picobot.config.settings import Settings, load_settings

if TYPE_CHECKING:
    from picobot.store.conversation.memories import Memory

log = logging.getLogger(__name__)


def add_memories_command(
    subparsers: Subcommands, *, parents: Sequence[argparse.ArgumentParser] = ()
) -> None:
    """Register ``memories --user ID [--set KEY CONTENT | --delete KEY] [--json]``."""
    help_text = "list, set or delete a user's memories"
    cmd = subparsers.add_parser("memories", help=help_text, description=help_text, parents=parents)
    cmd.set_defaults(handler=cmd_memories)
    cmd.add_argument("--user", required=True, metavar="USER_ID", help="whose memories")
    action = cmd.add_mutually_exclusive_group()
    action.add_argument("--set", nargs=2, metavar=("KEY", "CONTENT"), help="save a memory")
    action.add_argument("--delete", metavar="KEY", help="delete a memory")
    add_json_flag(cmd)


def memory_json(memory: Memory) -> dict[str, Any]:
    """A memory in ``memories --json`` (the owner is the object's ``user_id``)."""
    return record_json(memory, times=("created_at", "updated_at"), drop=("id", "user_id"))


def cmd_memories(args: argparse.Namespace) -> int:
    """The ``memories`` handler.

    Listing only reads: it creates no database and refuses an outdated schema (run
    ``picobot migrate``). ``--set`` and ``--delete`` write, and like every writing
    command create the database or apply pending migrations first.
    """
    settings = load_settings(getattr(args, "config", None))
    if not args.set and not settings.has_store:
        # Neither a listing nor a delete creates an empty database as a side effect.
        if args.delete:
            fail(f"{args.user} has no memory {args.delete} (no database at {settings.db_path})")
            return EXIT_ERROR
        if args.json:
            print_json({"user_id": args.user, "memories": []})
        else:
            print(f"no database at {settings.db_path}; no memories for {args.user}")
        return EXIT_OK
    if args.set or args.delete:
        with command_logging(settings):
            return asyncio.run(_change(args, settings))
    return asyncio.run(_list(args, settings))


async def _list(args: argparse.Namespace, settings: Settings) -> int:
    from picobot.runtime import build_services, open_database

    async with open_database(settings, schema="current") as db:
        memories = await build_services(settings, db).notes.list_of(args.user)
    if args.json:
        print_json({"user_id": args.user, "memories": [memory_json(m) for m in memories]})
        return EXIT_OK
    if not memories:
        print(f"no memories for {args.user}")
    for m in memories:
        print(f"{m.key}: {m.content}")
    return EXIT_OK


async def _change(args: argparse.Namespace, settings: Settings) -> int:
    from picobot.runtime import build_services, open_database
    from picobot.store.conversation.memories import validate_key

    async with open_database(settings, schema="migrate") as db:
        notes = build_services(settings, db).notes
        if args.set:
            saved = await notes.put(args.user, args.set[0], args.set[1], actor=operator_id())
            key = saved.key
            log.info("memory change by %s: saved 1 memory of %s", operator_id(), args.user)
            if args.json:
                print_json({"user_id": args.user, "saved": memory_json(saved)})
            else:
                print(f"saved {key} for {args.user}")
            return EXIT_OK
        key = validate_key(args.delete)
        if not await notes.remove(args.user, key, actor=operator_id()):
            fail(f"{args.user} has no memory {key}")
            return EXIT_ERROR
        log.info("memory change by %s: deleted 1 memory of %s", operator_id(), args.user)
        if args.json:
            print_json({"user_id": args.user, "deleted": key})
        else:
            print(f"deleted {key} of {args.user}")
        return EXIT_OK
