"""The memory operations MCP offers, as thin adapters over the chat's own.

Search is the ``memory_search`` tool's over the search service (the prompt recall's
ranking); notes go through the note service (the ``memory`` tool's and ``/remember``'s
rules); facts through the fact service ``/facts`` and ``/forget fact N`` use. Every
operation takes the caller's :class:`ToolContext`, built here from an authenticated user
id with the kernel's grants (:func:`grants_for`), and acts on that user's data at User
scope only: no tool takes a user id or a scope. Each call is rate-limited per user,
logged, and recorded as ``tool.started`` / ``tool.completed`` events (content-free), as
the chat's tool calls are.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from picobot.access.context import Action, Scope, ToolContext
from picobot.access.permissions import grants_for
from picobot.commands.facts import MAX_LISTED, fact_text
from picobot.config.settings import Settings
from picobot.errors import StoreUnavailable, UserError
from picobot.mcp.confirm import Confirmations, ForgetPlan
from picobot.ratelimit import TokenBucket
from picobot.runtime import build_services
from picobot.services.bundle import Services
from picobot.services.notes import NoteService
from picobot.store.conversation.events import record_event
from picobot.store.conversation.memories import validate_key
from picobot.store.db import Database
from picobot.store.learned.facts import FactFilter
from picobot.tools.memory_search import MemorySearchTool

log = logging.getLogger(__name__)

RATE_BURST = 20
"""Calls a user may make at once before the per-minute rate applies."""
MAX_BUCKETS = 10_000
"""Users whose rate limit is remembered at once (one per key; full buckets go first)."""
CHANNEL = "mcp"


class RateLimited(UserError):
    """The caller made too many calls; the message says when to try again."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one call answered: its text, and whether it succeeded."""

    ok: bool
    text: str


class MemoryAccess:
    """The caller-scoped memory operations, each run through :meth:`call`."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        *,
        services: Services | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``services``: the running server's (``picobot serve``); without, built for
        ``db`` as every CLI command builds them."""
        services = services if services is not None else build_services(settings, db)
        self._settings = settings
        self._db = db
        self._clock = clock
        self._notes: NoteService | None = None
        if settings.session.memory.enable_user_memories:
            self._notes = services.notes
        search = services.search
        self._search = MemorySearchTool(search.index, terms=search.terms, meaning=search.meaning)
        self._facts = services.facts
        self.confirmations = Confirmations(settings.privacy.confirmation_timeout_secs, clock)
        self._per_minute = settings.channels.mcp.rate_limit_per_minute
        self._buckets: dict[str, TokenBucket] = {}

    def context(self, user_id: str) -> ToolContext:
        """The ToolContext of an authenticated ``user_id``: own data, plus configured grants."""
        return ToolContext(
            user_id=user_id, channel=CHANNEL, grants=grants_for(user_id, self._settings)
        )

    # --- the gate every call passes ----------------------------------------------------

    def _admit(self, user_id: str) -> None:
        bucket = self._buckets.get(user_id)
        if bucket is None:
            if len(self._buckets) >= MAX_BUCKETS:
                for key in [k for k, b in self._buckets.items() if b.full]:
                    del self._buckets[key]
            bucket = TokenBucket(self._per_minute, RATE_BURST, self._clock)
            self._buckets[user_id] = bucket
        if not bucket.take():
            wait = max(1, round(bucket.wait_secs() + 0.5))
            raise RateLimited(f"Too many calls; try again in {wait} seconds.")

    async def call(
        self, ctx: ToolContext, name: str, operation: Callable[[], Awaitable[str]]
    ) -> Outcome:
        """Run ``operation`` for ``ctx``: rate-limited, logged and evented; never raises
        for what the caller did wrong (the text says it) or for an internal failure
        (logged with its traceback; the caller gets a generic line)."""
        started = time.time()
        try:
            self._admit(ctx.user_id)
        except RateLimited as exc:
            # Refused before it ran: logged, but no events (a flood must not grow the table).
            log.info("mcp %s for %s: rate limited", name, ctx.user_id)
            return Outcome(False, str(exc))
        try:
            outcome = Outcome(True, await operation())
        except UserError as exc:
            outcome = Outcome(False, str(exc))
        except Exception:
            log.exception("mcp %s failed for %s", name, ctx.user_id)
            outcome = Outcome(False, "The call failed with an internal error.")
        try:
            await self._record(ctx.user_id, name, outcome.ok, started)
        except StoreUnavailable as exc:
            # The answer stands (a read succeeded, a write is committed); only its event
            # is missing, which the log says.
            log.warning("mcp %s for %s: no event recorded: %s", name, ctx.user_id, exc)
        log.info("mcp %s for %s: %s", name, ctx.user_id, "ok" if outcome.ok else "failed")
        return outcome

    async def _record(self, user_id: str, name: str, ok: bool, started: float) -> None:
        ended = time.time()
        payload = {"name": name, "via": CHANNEL}

        # Both in one write after the call, as the kernel records its tool calls.
        def write(conn: Any) -> None:
            record_event(conn, "tool.started", started, user_id=user_id, payload=payload)
            record_event(
                conn, "tool.completed", ended, user_id=user_id, payload={**payload, "ok": ok}
            )

        await self._db.write(write)

    # --- the operations ----------------------------------------------------------------

    async def search(self, ctx: ToolContext, query: str, top_k: int) -> str:
        """The caller's best-matching messages and notes, ranked as recall ranks them."""
        return await self._search.run(ctx, {"query": query, "top_k": top_k})

    def _service(self) -> NoteService:
        if self._notes is None:
            raise UserError("Notes (user memories) are switched off on this server.")
        return self._notes

    async def remember(self, ctx: ToolContext, key: str, content: str) -> str:
        """Save or update the caller's note ``key``."""
        service = self._service()
        memory, created = await service.save(ctx, key, content)
        return service.saved_text(memory, created)

    async def notes(self, ctx: ToolContext, limit: int | None = None) -> str:
        """The caller's notes, newest first (at most ``limit``)."""
        service = self._service()
        found = await service.list(ctx)
        return service.listing_text(found if limit is None else found[: max(limit, 0)])

    async def facts(self, ctx: ToolContext, limit: int = MAX_LISTED) -> str:
        """What PicoBot learned about the caller, most confident first (at most ``limit``,
        never more than the chat's /facts lists)."""
        ctx.require(Action.MEMORY_READ, Scope.USER)
        where = FactFilter(user_id=ctx.user_id)
        shown = max(1, min(limit, MAX_LISTED))
        found = await self._facts.find(where, shown + 1)
        if not found:
            return "No learned facts yet."
        lines = [fact_text(f) for f in found[:shown]]
        if len(found) > shown:
            lines.append(f"(the first {shown}; the rest are less certain)")
        return "Learned facts (confidence 0-1), most confident first:\n" + "\n".join(lines)

    async def plan_forget(self, ctx: ToolContext, note: str | None, fact: int | None) -> str:
        """Step one: what a forget would delete, and the token that confirms it."""
        if (note is None) == (fact is None):
            raise UserError("Name exactly one thing to forget: note (a key) or fact (a number).")
        ctx.require(Action.MEMORY_WRITE, Scope.USER)
        if note is not None:
            key = validate_key(note)
            service = self._service()
            owner = service.owner(ctx, Action.MEMORY_WRITE, Scope.USER)
            if await service.get_of(owner, key) is None:
                raise UserError(f"There is no note {key!r} to forget.")
            plan = ForgetPlan("note", key, f"This deletes 1 note ({key!r}) and nothing else.")
        else:
            assert fact is not None
            found = await self._facts.get(fact)
            if found is None or found.user_id != ctx.user_id:
                raise UserError(f"No fact #{fact} of yours; list_facts shows them.")
            plan = ForgetPlan(
                "fact",
                str(fact),
                f"This deletes 1 learned fact (#{fact}) with its history and sources.",
            )
        token = self.confirmations.issue(ctx.user_id, plan)
        secs = round(self.confirmations.timeout_secs)
        return (
            f"{plan.summary} Nothing is deleted yet. To confirm, call forget with "
            f'confirmation="{token}" within {secs} seconds; the token works once.'
        )

    async def confirm_forget(self, ctx: ToolContext, token: str) -> str:
        """Step two: carry out the plan of ``token`` (single use, same user, unexpired)."""
        ctx.require(Action.MEMORY_WRITE, Scope.USER)
        plan = self.confirmations.take(ctx.user_id, token)
        if plan.kind == "note":
            gone = await self._service().delete(ctx, plan.target)
            return f"Forgot note {gone.key!r}."
        fact_id = int(plan.target)
        deleted = await self._facts.delete(FactFilter(user_id=ctx.user_id, ids=(fact_id,)))
        if not deleted:
            raise UserError(f"Fact #{fact_id} is already gone; nothing was deleted.")
        return f"Forgot fact #{fact_id}."
