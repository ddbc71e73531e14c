"""``picobot purge``: operator purges from the host, with a y/n prompt on the terminal.

The plan (exact counts) is printed first. The purge runs only after ``y``/``yes`` typed
on an interactive terminal, or with ``--yes``; a non-interactive stdin without
``--yes`` is refused, so a script can never delete by accident. The purge runs as the
operator ``cli:<user>`` and is logged (scope, actor, counts; never content) where
``serve`` logs, by the privacy controller as for a purge from a chat or the API.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from picobot.cli.common import EXIT_ERROR, EXIT_OK, EXIT_USAGE, fail
from picobot.cli.operator import command_logging, operator_id
from picobot.config.settings import Settings
from picobot.errors import StoreUnavailable

if TYPE_CHECKING:
    from picobot.privacy.controller import PurgeResult
    from picobot.privacy.scopes import PurgeScope

log = logging.getLogger(__name__)

AddCommand = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]


def add_purge_command(add: AddCommand, run: Callable[[argparse.Namespace], int]) -> None:
    """Register ``purge session ID | user USER_ID | older DAYS [--yes]``."""
    purge = add("purge", run, "delete a session, a user's data, or data older than N days")
    purge.add_argument("scope", choices=("session", "user", "older"), help="what to purge")
    purge.add_argument("target", metavar="ID|USER_ID|DAYS", help="session id, user id or days")
    purge.add_argument("--yes", action="store_true", help="do not ask; purge at once")


def scope_from(args: argparse.Namespace) -> PurgeScope:
    """The purge scope named on the command line; DAYS in 1..MAX_PURGE_DAYS, as in the API."""
    from picobot.privacy.scopes import MAX_PURGE_DAYS, OlderThanScope, SessionScope, UserScope

    if args.scope == "session":
        return SessionScope(args.target)
    if args.scope == "user":
        return UserScope(args.target)
    try:
        days = int(args.target)
    except ValueError:
        days = 0
    if not 1 <= days <= MAX_PURGE_DAYS:
        raise argparse.ArgumentTypeError(
            f"DAYS must be a number from 1 to {MAX_PURGE_DAYS}, not {args.target!r}"
        )
    return OlderThanScope(days)


async def purge(
    settings: Settings,
    scope: PurgeScope,
    *,
    assume_yes: bool,
    stdin: TextIO,
    stdout: TextIO,
) -> int:
    """Plan, ask (unless --yes), execute; return the exit status."""
    from picobot.privacy.scopes import Actor, SessionScope
    from picobot.runtime import build_services, open_database
    from picobot.services.purges import NoSuchSession

    operator = Actor(operator_id(), operator=True)

    if not settings.has_store:
        # Nothing to purge, and a purge must not create an empty database either.
        if isinstance(scope, SessionScope):
            fail(f"no session {scope.session_id} (no database at {settings.db_path})")
            return EXIT_ERROR
        print(f"no database at {settings.db_path}; nothing to purge", file=stdout)
        return EXIT_OK
    async with open_database(settings) as db:
        purges = build_services(settings, db).purges
        # A typo must not read as "nothing to delete" (the admin API answers 404).
        if isinstance(scope, SessionScope):
            try:
                await purges.existing_session(scope.session_id)
            except NoSuchSession:
                fail(f"no session {scope.session_id}")
                return EXIT_ERROR
        pending = await purges.request(scope, operator)
        print(pending.plan.prompt().replace(" Answer y or n.", ""), file=stdout)
        if pending.plan.counts.total == 0:
            return EXIT_OK
        if assume_yes:
            answer = "y"
        elif not stdin.isatty():
            fail(
                "refusing to purge without confirmation: stdin is not a terminal; pass"
                " --yes to purge non-interactively"
            )
            return EXIT_ERROR
        else:
            print("Proceed? [y/N] ", end="", file=stdout, flush=True)
            answer = stdin.readline().strip()
        try:
            result: PurgeResult | None = await purges.confirm(pending.token, operator, answer)
        except StoreUnavailable as exc:
            log.error("purge by %s failed: %s: %s", operator.id, scope.describe(), exc)
            fail(
                f"the purge failed: {exc}\nRows it deleted before the failure, if any, stay"
                " deleted: run the same purge again to finish it. What they left on disk"
                " is erased by the next retention run (the server's, or `picobot retention"
                " run`)."
            )
            return EXIT_ERROR
        if result is None:
            print("Cancelled; nothing was deleted.", file=stdout)
            return EXIT_ERROR
        print(f"{result.summary()} ({result.duration_secs:.2f}s)", file=stdout)
        return EXIT_OK


def run_purge(args: argparse.Namespace, settings: Settings) -> int:
    """Entry point for ``picobot purge``."""
    try:
        scope = scope_from(args)
    except argparse.ArgumentTypeError as exc:
        fail(str(exc))
        return EXIT_USAGE
    with command_logging(settings):
        return asyncio.run(
            purge(settings, scope, assume_yes=args.yes, stdin=sys.stdin, stdout=sys.stdout)
        )
