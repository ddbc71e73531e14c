"""``picobot memories``: an operator's view of one user's memories, from the host."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

from picobot.cli.common import EXIT_ERROR, EXIT_OK, fail
from picobot.config.settings import Settings, load_settings


def add_memories_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    *,
    parents: Sequence[argparse.ArgumentParser] = (),
) -> None:
    """Register ``memories --user ID [--set KEY CONTENT | --delete KEY]``."""
    help_text = "list, set or delete a user's memories"
    cmd = subparsers.add_parser(
        "memories", help=help_text, description=help_text, parents=list(parents)
    )
    cmd.set_defaults(handler=cmd_memories)
    cmd.add_argument("--user", required=True, metavar="USER_ID", help="whose memories")
    action = cmd.add_mutually_exclusive_group()
    action.add_argument("--set", nargs=2, metavar=("KEY", "CONTENT"), help="save a memory")
    action.add_argument("--delete", metavar="KEY", help="delete a memory")


def cmd_memories(args: argparse.Namespace) -> int:
    """The ``memories`` handler.

    Listing only reads: it creates no database and refuses an outdated schema (run
    ``picobot migrate``). ``--set`` and ``--delete`` write, and like every writing
    command create the database or apply pending migrations first.
    """
    settings = load_settings(getattr(args, "config", None))
    writes = bool(args.set or args.delete)
    if not args.set and not settings.db_path.is_file():
        # Neither a listing nor a delete creates an empty database as a side effect.
        if args.delete:
            fail(f"{args.user} has no memory {args.delete} (no database at {settings.db_path})")
            return EXIT_ERROR
        print(f"no database at {settings.db_path}; no memories for {args.user}")
        return EXIT_OK
    return asyncio.run(_run(args, settings, writes=writes))


async def _run(args: argparse.Namespace, settings: Settings, *, writes: bool) -> int:
    from picobot.privacy.redaction import Redactor
    from picobot.runtime import open_database
    from picobot.store.memories import MemoryRepo, validate_content, validate_key

    memory = settings.session.memory
    async with open_database(settings, schema="migrate" if writes else "current") as db:
        repo = MemoryRepo(db)
        if args.set:
            key = validate_key(args.set[0])
            content = validate_content(args.set[1], memory.max_memory_chars)
            content = Redactor.from_settings(settings.privacy).redact(content)
            await repo.save(args.user, key, content, max_count=memory.max_user_memories)
            print(f"saved {key} for {args.user}")
            return EXIT_OK
        if args.delete:
            if not await repo.delete(args.user, validate_key(args.delete)):
                fail(f"{args.user} has no memory {args.delete}")
                return EXIT_ERROR
            print(f"deleted {args.delete} of {args.user}")
            return EXIT_OK
        memories = await repo.list(args.user)
        if not memories:
            print(f"no memories for {args.user}")
        for m in memories:
            print(f"{m.key}: {m.content}")
        return EXIT_OK
