"""``picobot facts``: an operator's view and edits of learned facts, from the host.

``list`` and ``show`` only read (they create no database and refuse an outdated
schema). ``create``, ``update``, ``delete`` and ``extract`` write; they are logged
with the actor (``cli:<user>``), the fact ids and counts, never a fact's text (user data
that a purge erases from the database but could not erase from a log file). A delete
is a purge of the chosen facts (:mod:`picobot.privacy.fact_scope`), two-step like any
purge: it states how many facts of how many users it deletes and asks y/N (``--yes``
skips the question; a non-interactive stdin without it is refused), then erases them.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from picobot.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    Subcommands,
    add_json_flag,
    fail,
    print_json,
    record_json,
    with_settings,
)
from picobot.cli.operator import command_logging, operator_id
from picobot.config.settings import Settings

if TYPE_CHECKING:
    from picobot.store.learned.facts import Fact, FactFilter

log = logging.getLogger(__name__)


def _confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"confidence must be a number, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"confidence must be between 0 and 1, got {value}")
    return value


def _filters(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--user", metavar="USER_ID", help="only this user's facts")
    cmd.add_argument("--subject", help="only facts about this subject ('' for general ones)")
    cmd.add_argument("--category", help="only this category")
    state = cmd.add_mutually_exclusive_group()
    state.add_argument("--active", dest="active", action="store_true", default=None)
    state.add_argument("--inactive", dest="active", action="store_false")
    pin = cmd.add_mutually_exclusive_group()
    pin.add_argument("--pinned", dest="pinned", action="store_true", default=None)
    pin.add_argument("--unpinned", dest="pinned", action="store_false")
    cmd.add_argument("--min-confidence", type=_confidence, metavar="X")
    cmd.add_argument("--max-confidence", type=_confidence, metavar="X")
    cmd.add_argument("--text", help="only facts whose text or subject contains this")


def add_facts_command(
    subparsers: Subcommands, *, parents: Sequence[argparse.ArgumentParser] = ()
) -> None:
    """Register ``facts list|show|create|update|delete|extract``."""
    help_text = "list, inspect and edit learned facts (see docs/learning.md)"
    facts = subparsers.add_parser("facts", help=help_text, description=help_text, parents=parents)
    actions = facts.add_subparsers(
        dest="facts_action", metavar="ACTION", title="actions", required=True
    )

    def action(name: str, text: str) -> argparse.ArgumentParser:
        cmd = actions.add_parser(name, help=text, description=text, parents=parents)
        cmd.set_defaults(handler=with_settings(run_facts))
        return cmd

    listing = action("list", "list facts across users, most confident first")
    _filters(listing)
    listing.add_argument("--limit", type=int, default=200, help="most facts shown (200)")
    add_json_flag(listing)
    show = action("show", "show one fact with its sources and history")
    show.add_argument("id", type=int)
    add_json_flag(show)
    create = action("create", "add a fact for a user")
    create.add_argument("--user", required=True, metavar="USER_ID")
    create.add_argument("--category", required=True)
    create.add_argument("--subject", help="what or whom it is about (none: general)")
    create.add_argument("--confidence", type=_confidence, metavar="X")
    create.add_argument("text")
    add_json_flag(create)
    update = action("update", "change a fact's text, confidence, active flag or pin")
    update.add_argument("id", type=int)
    update.add_argument("--text")
    update.add_argument("--confidence", type=_confidence, metavar="X")
    state = update.add_mutually_exclusive_group()
    state.add_argument("--activate", dest="active", action="store_true", default=None)
    state.add_argument("--deactivate", dest="active", action="store_false")
    pin = update.add_mutually_exclusive_group()
    pin.add_argument("--pin", dest="pinned", action="store_true", default=None)
    pin.add_argument("--unpin", dest="pinned", action="store_false")
    add_json_flag(update)
    delete = action("delete", "delete facts by id or by filter (asks first)")
    delete.add_argument("ids", nargs="*", type=int, metavar="ID")
    _filters(delete)
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    extract = action("extract", "learn from sessions now with the configured model")
    target = extract.add_mutually_exclusive_group(required=True)
    target.add_argument("--session", metavar="ID", help="one session")
    target.add_argument("--user", metavar="USER_ID", help="every session of a user")


def _where(args: argparse.Namespace) -> FactFilter:
    from picobot.store.learned.facts import operator_filter

    # The same checks as the admin API's (an unknown category is an error, not "none").
    return operator_filter(
        user_id=args.user,
        subject=args.subject,
        category=args.category,
        active=args.active,
        pinned=args.pinned,
        min_confidence=args.min_confidence,
        max_confidence=args.max_confidence,
        text=args.text,
        ids=tuple(getattr(args, "ids", ()) or ()),
    )


def fact_json(fact: Fact) -> dict[str, Any]:
    """A fact in ``facts --json``."""
    return record_json(fact, times=("created_at", "updated_at"))


def run_facts(args: argparse.Namespace, settings: Settings) -> int:
    """The ``facts`` handler: reads open the database as is, writes migrate it first."""
    action = args.facts_action
    if action in ("list", "show"):
        if not settings.has_store:
            if action == "show":
                fail(f"no fact {args.id} (no database at {settings.db_path})")
                return EXIT_ERROR
            print_json({"facts": []}) if args.json else print("no facts")
            return EXIT_OK
        return asyncio.run(_read(args, settings))
    if action == "update" and all(
        value is None for value in (args.text, args.confidence, args.active, args.pinned)
    ):
        fail(
            "nothing to change: give --text, --confidence, --activate/--deactivate or --pin/--unpin"
        )
        return EXIT_USAGE
    if action == "delete" and _where(args).names_nothing:
        fail("name the facts to delete: ids, or at least one filter")
        return EXIT_USAGE
    with command_logging(settings):
        if action == "delete":
            return asyncio.run(_delete(args, settings))
        return asyncio.run(_write(args, settings))


async def _read(args: argparse.Namespace, settings: Settings) -> int:
    from picobot.cli.fact_views import print_fact, print_listing
    from picobot.runtime import open_database
    from picobot.store.learned.facts import fact_history, fact_sources, find_facts, get_fact

    async with open_database(settings, schema="current") as db:
        if args.facts_action == "list":
            where = _where(args)
            found = await db.read(lambda c: find_facts(c, where, max(0, args.limit)))
            return print_listing(found, as_json=args.json)
        fact = await db.read(lambda c: get_fact(c, args.id))
        if fact is None:
            fail(f"no fact {args.id}")
            return EXIT_ERROR
        sources = await db.read(lambda c: fact_sources(c, args.id))
        history = await db.read(lambda c: fact_history(c, args.id))
    return print_fact(fact, sources, history, as_json=args.json)


async def _write(args: argparse.Namespace, settings: Settings) -> int:
    from picobot.cli.fact_views import print_fact
    from picobot.runtime import build_services, open_database

    actor = operator_id()
    async with open_database(settings) as db:
        facts = build_services(settings, db).facts
        if args.facts_action == "extract":
            return await _extract(args, settings, db)
        if args.facts_action == "create":
            fact = await facts.create(
                args.user,
                subject=args.subject,
                category=args.category,
                text=args.text,
                confidence=args.confidence,
                actor=actor,
            )
            log.info("fact change by %s: created fact %d of %s", actor, fact.id, args.user)
        else:
            updated = await facts.edit(
                args.id,
                text=args.text,
                confidence=args.confidence,
                active=args.active,
                pinned=args.pinned,
                actor=actor,
            )
            if updated is None:
                fail(f"no fact {args.id}")
                return EXIT_ERROR
            fact = updated
            log.info("fact change by %s: updated fact %d of %s", actor, fact.id, fact.user_id)
    return print_fact(fact, None, None, as_json=args.json)


async def _delete(args: argparse.Namespace, settings: Settings) -> int:
    """A purge of the facts chosen now (ids fixed before the question is asked)."""
    from picobot.cli.purge import purge
    from picobot.runtime import build_services, open_database

    if not settings.has_store:
        print(f"no database at {settings.db_path}; nothing to delete")
        return EXIT_OK
    async with open_database(settings) as db:
        scope = await build_services(settings, db).facts.choose(_where(args))
    return await purge(settings, scope, assume_yes=args.yes, stdin=sys.stdin, stdout=sys.stdout)


async def _extract(args: argparse.Namespace, settings: Settings, db: Any) -> int:
    from picobot.config.learning import learning_state
    from picobot.llm.factory import build_provider
    from picobot.runtime import learning_task
    from picobot.store.conversation.sessions import SessionRepo

    # Extraction is background work: the [llm.background] model when one is named.
    provider = build_provider(settings.llm.for_background() or settings.llm)
    try:
        task = learning_task(settings, db, provider)
        if task is None:
            state = learning_state(
                settings.memory.learning, settings.llm, bundled=getattr(provider, "bundled", False)
            )
            fail(f"learning is {state.describe()}")
            return EXIT_ERROR
        if args.session:
            sessions = [args.session]
        else:
            sessions = await SessionRepo(db).ids_of(args.user)
        created = reinforced = read = 0
        for sid in sessions:
            done = await task.extract_session(sid)
            created, reinforced, read = (
                created + done.created,
                reinforced + done.reinforced,
                read + done.messages,
            )
    finally:
        await provider.aclose()
    log.info("fact extraction by %s: %d sessions, %d facts", operator_id(), len(sessions), created)
    print(
        f"Read {read} new messages of {len(sessions)} sessions: {created} new facts,"
        f" {reinforced} reinforced."
    )
    return EXIT_OK
