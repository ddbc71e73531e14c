"""PrivacyController: planned, confirmed, logged purges.

A purge is a two-step exchange. :meth:`PrivacyController.request` checks the actor's
rights and returns a :class:`PendingPurge`: the exact counts of what would be deleted
and a single-use token that expires after ``confirmation_timeout_secs``. Only
:meth:`PrivacyController.confirm` with the same actor and the answer ``y`` or ``yes``
executes it; any other answer, a different actor or an expired token deletes nothing.
Pending purges are kept in the store (:mod:`picobot.store.erasure.pending_purges`), so
every instance sharing it can take the answer, and each is taken once.

Rights: a chat user may purge their own sessions and their own user data; OlderThan
and anyone else's data need operator rights (the CLI on the host, the admin API).
This is kernel-level machinery; no tool exposes it to the model.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

from picobot.errors import AccessDenied, UserError
from picobot.metrics import observe_purge

# The built-in scopes register their rules when imported; a new scope's module joins here.
from picobot.privacy import fact_scope as _fact_scope  # noqa: F401
from picobot.privacy import message_scope as _message_scope  # noqa: F401
from picobot.privacy.scopes import (
    SCOPE_TYPES,
    Actor,
    PurgeScope,
    ScopeDeps,
    rules_for,
)
from picobot.store import purge_generation
from picobot.store.conversation.event_prune import finish_purge, record_purge_step
from picobot.store.conversation.messages import HoldCheck
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.erasure.erase import erase_residue
from picobot.store.erasure.message_purge import MessagePurge
from picobot.store.erasure.pending_purges import (
    PendingPurges,
    StoredPurge,
    asked_from_in,
    token_key,
)
from picobot.store.erasure.purge import PurgeCounts, PurgeStore
from picobot.store.learned.fact_purge import FactPurge
from picobot.store.task_runs import (
    PURGE_ERASE_TASK_NAME,
    RESIDUE_ERASED,
    error_text,
    note_residue,
    record_run,
    record_start,
)

log = logging.getLogger(__name__)

YES = frozenset({"y", "yes"})
NO_SUCH_PURGE = "There is no pending purge with that confirmation (or it expired)."


class PurgeExpired(UserError):
    """The confirmation of a pending purge came after it expired; nothing was deleted."""


def is_yes(answer: str) -> bool:
    """Whether an answer confirms: ``y`` or ``yes``, in any case."""
    return answer.strip().lower() in YES


@dataclass(frozen=True, slots=True)
class PurgePlan:
    """What a purge would delete, computed before anything is deleted."""

    scope: PurgeScope
    actor: Actor
    counts: PurgeCounts
    cutoff: float | None = None

    def prompt(self) -> str:
        """The confirmation question, stating exactly what will be deleted."""
        if self.counts.total == 0:
            return f"Nothing is stored for {self.scope.describe()}."
        return (
            f"Permanently delete {self.scope.describe()}: {self.counts.describe()}? "
            "This cannot be undone. Answer y or n."
        )


@dataclass(frozen=True, slots=True)
class PendingPurge:
    """A plan waiting for its y/n answer."""

    token: str
    """The confirmation token; empty in a pending purge read back from the store (only
    the one it was issued to knows it)."""
    plan: PurgePlan
    expires_at: float
    origin: tuple[str, str] | None = None
    """The (channel, chat) it was requested from: only an answer from there counts as
    the next-message answer (None: no chat, e.g. the admin API)."""
    key: str = ""
    """What the store keys it by (:func:`token_key` of the token)."""


def _dump(pending: PendingPurge) -> StoredPurge:
    """The stored form: the plan as JSON of ids, counts and a cutoff (no content)."""
    plan = pending.plan
    scope = {f.name: getattr(plan.scope, f.name) for f in fields(plan.scope)}  # type: ignore[arg-type]
    body = {"kind": plan.scope.kind, "scope": scope, "counts": asdict(plan.counts)}
    user_id, _ = rules_for(plan.scope).owner(plan.scope)
    return StoredPurge(
        pending.key,
        plan.actor.id,
        plan.actor.operator,
        pending.origin,
        user_id,
        json.dumps({**body, "cutoff": plan.cutoff}),
        pending.expires_at,
    )


def _load(stored: StoredPurge) -> PendingPurge:
    """A pending purge read back from the store (without its token)."""
    body = json.loads(stored.plan)
    scope_fields = {k: tuple(v) if isinstance(v, list) else v for k, v in body["scope"].items()}
    scope = SCOPE_TYPES.get(body["kind"])(**scope_fields)
    actor = Actor(stored.actor_id, stored.operator)
    plan = PurgePlan(scope, actor, PurgeCounts(**body["counts"]), body["cutoff"])
    return PendingPurge("", plan, stored.expires_at, stored.origin, stored.key)


@dataclass(frozen=True, slots=True)
class PurgeResult:
    """What a purge deleted and how long it took."""

    scope: PurgeScope
    counts: PurgeCounts
    duration_secs: float

    def summary(self) -> str:
        """One line for the user."""
        return f"Deleted {self.scope.describe()}: {self.counts.describe()}."


def _event_actor(actor: Actor) -> str | None:
    """The actor an event names: an operator; a user acting on their own data is null."""
    return actor.id if actor.operator else None


class PrivacyController:
    """Plans, confirms and executes purges; the only way data is deleted on request."""

    def __init__(
        self,
        db: Database,
        *,
        confirmation_timeout_secs: float = 60,
        batch_size: int = 500,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self.db = db
        """The database it purges."""
        self._timeout = confirmation_timeout_secs
        self._batch = batch_size
        self._clock = clock
        self._deps = ScopeDeps(
            PurgeStore(db),
            FactPurge(db),
            SessionRepo(db),
            batch_size,
            lambda: self._clock(),
            MessagePurge(db),
        )
        self._pending = PendingPurges(db)
        self.on_purged: list[Callable[[str], None]] = []
        """Called with the session id after a purge of (part of) a session executed:
        what caches its prompt forgets it (see :meth:`MemoryRetriever.forget`)."""
        self.after_purge: list[Callable[[], None]] = []
        """Called after every purge executed, whatever its scope: what keeps evaluated
        prompts drops them (see :meth:`LocalProvider.forget_prompts`)."""

    async def authorize(self, scope: PurgeScope, actor: Actor) -> None:
        """Raise AccessDenied unless ``actor`` may purge ``scope``."""
        if actor.operator:
            return
        if await rules_for(scope).allows(scope, actor, self._deps):
            return
        raise AccessDenied("Only an operator can purge that.")

    async def plan(self, scope: PurgeScope, actor: Actor) -> PurgePlan:
        """Check rights and count exactly what would be deleted."""
        await self.authorize(scope, actor)
        counted = await rules_for(scope).count(scope, self._deps)
        return PurgePlan(scope, actor, counted.counts, counted.cutoff)

    async def request(
        self, scope: PurgeScope, actor: Actor, origin: tuple[str, str] | None = None
    ) -> PendingPurge:
        """Plan a purge and hold it for a y/n answer from the same actor (one pending
        purge per actor: a new request replaces the old one)."""
        plan = await self.plan(scope, actor)
        token = secrets.token_urlsafe(16)
        now = self._clock()
        pending = PendingPurge(token, plan, now + self._timeout, origin, token_key(token))
        if plan.counts.total:
            await self._pending.hold(_dump(pending), now)
            await self._note("purge.requested", plan)
        return pending

    async def pending_for(
        self, actor: Actor, origin: tuple[str, str], answer: str
    ) -> PendingPurge | None:
        """The actor's pending purge requested from ``origin`` that ``answer``, their
        next message there, answers, if any (answer it with :meth:`confirm_pending`).

        One that expired still takes a y/yes (which is then told that nothing was
        deleted); any other message drops it and is not an answer.
        """
        now = self._clock()
        stored = await self._pending.asked_from(actor.id, actor.operator, origin, now)
        if stored is None:
            return None
        if now > stored.expires_at and not is_yes(answer):
            await self._pending.drop(stored.key)
            return None
        return _load(stored)

    def awaits_answer(self, actor: Actor, origin: tuple[str, str]) -> HoldCheck:
        """A check for the write that stores the actor's next message in ``origin``: True
        when :meth:`pending_for` may find a purge it answers. Run in that write, it sees
        what every instance committed, and costs a turn no read of its own."""
        return lambda conn: asked_from_in(conn, actor.id, actor.operator, origin, self._clock())

    async def confirm(self, token: str, actor: Actor, answer: str) -> PurgeResult | None:
        """Answer a pending purge: execute on y/yes, cancel on anything else.

        The token is single use, on every instance sharing the store. An unknown token,
        or one that belongs to another actor, raises UserError, an expired one
        :class:`PurgeExpired`; neither deletes anything.
        """
        return await self._answer(token_key(token), actor, answer)

    async def confirm_pending(
        self, pending: PendingPurge, actor: Actor, answer: str
    ) -> PurgeResult | None:
        """:meth:`confirm` for a pending purge found by :meth:`pending_for`."""
        return await self._answer(pending.key, actor, answer)

    async def _answer(self, key: str, actor: Actor, answer: str) -> PurgeResult | None:
        stored = await self._pending.take(key, actor.id, actor.operator, self._clock())
        if stored is None:
            raise UserError(NO_SUCH_PURGE)
        pending = _load(stored)
        if self._clock() > pending.expires_at:
            log.info("purge confirmation expired: %s by %s", pending.plan.scope, actor.id)
            raise PurgeExpired("The purge confirmation expired; nothing was deleted.")
        if not is_yes(answer):
            log.info("purge cancelled: %s by %s", pending.plan.scope, actor.id)
            return None
        await self._note("purge.confirmed", pending.plan)
        return await self.execute(pending.plan)

    async def execute(self, plan: PurgePlan) -> PurgeResult:
        """Delete what the plan names, then erase the residue from the files.

        The purge is recorded (``task_runs`` row ``purge-erase``) before anything is
        deleted and again once the residue is erased: if it fails or the process dies
        in between, the next retention run erases what it left behind.

        A user purge with per-user keys is a key deletion: the key goes first (see
        ``PurgeStore.delete_user``), so whatever was sealed with it is unreadable at
        once, in these files and every backup; the rows are deleted in batches and the
        WAL is checkpointed passively; neither the file is rewritten nor the WAL
        truncated (both stall every other writer): a stale copy of what is stored in
        clear (the user's id, and rows from before per-user keys that ``picobot
        migrate`` has not sealed yet) left in a page or a WAL frame waits for
        retention's next erasure, noted as residue before anything is deleted.
        """
        await self.authorize(plan.scope, plan.actor)
        started, started_at = time.monotonic(), self._clock()
        scope = plan.scope
        shredded = scope.kind == "user" and self._db.sealer.keyed
        await record_start(self._db, PURGE_ERASE_TASK_NAME, started_at)
        deleting = True
        try:
            if shredded:
                await note_residue(self._db, started_at)
            counts = await self._delete(plan)
            # Before the erasure, so the erased bytes include the events it deletes.
            user_id, session_id = rules_for(scope).owner(scope)
            await finish_purge(
                self._db,
                scope.kind,
                user_id=user_id,
                session_id=session_id,
                counts=asdict(counts),
                actor=_event_actor(plan.actor),
                now=self._clock(),
                batch_size=self._batch,
            )
            # Every process sharing the store drops what it keeps of the deleted data
            # (picobot.tasks.purge_watch), before the erasure, which may take seconds.
            deleting = False
            await purge_generation.advance(self._db)
            if shredded:
                # A key deletion: what was sealed is unreadable already. What was in
                # clear (ids, unsealed old rows) waits in freed pages and WAL frames for
                # retention's erasure, noted above; a passive checkpoint keeps the WAL
                # small without holding the writers (a TRUNCATE stalled them ~0.2 s).
                await self._db.checkpoint_passive()
            else:
                await erase_residue(self._db)
        except Exception as exc:
            if deleting:  # some of it may be deleted: the other processes look too
                await purge_generation.advance_after_failure(self._db)
            await self._record(started_at, error=error_text(exc))
            raise
        await self._record(started_at)
        if session_id is not None:
            for forget in self.on_purged:
                forget(session_id)
        for drop in self.after_purge:
            drop()
        result = PurgeResult(scope, counts, time.monotonic() - started)
        observe_purge(scope.kind)
        # Scope, actor, counts and duration; never content.
        log.info(
            "purge executed: %s by %s%s: %s in %.3fs",
            scope,
            plan.actor.id,
            " (operator)" if plan.actor.operator else "",
            counts.describe(),
            result.duration_secs,
        )
        return result

    async def _delete(self, plan: PurgePlan) -> PurgeCounts:
        return await rules_for(plan.scope).delete(plan.scope, plan.cutoff, self._deps)

    async def _note(self, type_: str, plan: PurgePlan) -> None:
        """Record a step of the exchange against the purged user or session."""
        scope = plan.scope
        user_id, session_id = rules_for(scope).owner(scope)
        await record_purge_step(
            self._db,
            type_,
            scope.kind,
            user_id=user_id,
            session_id=session_id,
            actor=_event_actor(plan.actor),
            total=plan.counts.total,
            now=self._clock(),
        )

    async def _record(self, started_at: float, error: str | None = None) -> None:
        """Record the purge's end: erased, or failed (its residue left for retention)."""
        try:
            await record_run(
                self._db,
                PURGE_ERASE_TASK_NAME,
                started_at=started_at,
                finished_at=self._clock(),
                ok=error is None,
                result=RESIDUE_ERASED if error is None else None,
                error=error,
            )
        except Exception:
            # The row still says unfinished, which the next start's retention run
            # also erases after; the purge's own outcome is what the caller needs.
            log.exception("could not record the purge's erasure")
