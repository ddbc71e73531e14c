"""Admin API routes for operations: retention status and the two-step purge.

A purge is planned by ``POST /api/v1/purge`` (exact counts, a confirmation token)
and executed by ``POST /api/v1/purge/{token}/confirm`` with ``{"answer": "y"}``. The
:class:`PrivacyController` holds the pending plan: single use, expiring, bound to the
requesting actor, one per actor. This module keeps a small table of the tokens it
issued (the latest of each key, until used or replaced) only to tell "expired" (410)
apart from "unknown, used, replaced, or another key's" (404).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from picobot.admin import models as m
from picobot.admin import purge_models as pm
from picobot.admin.http import ApiError, json_response, read_model, read_query
from picobot.config.settings import Settings
from picobot.errors import UserError
from picobot.logsafe import loggable
from picobot.privacy.controller import (
    DAY,
    Actor,
    OlderThanScope,
    PrivacyController,
    PurgeScope,
    SessionScope,
    UserScope,
)
from picobot.privacy.fact_scope import FactsScope, choose_facts
from picobot.store.db import Database
from picobot.store.purge import PurgeStore
from picobot.store.sessions import SessionRepo
from picobot.tasks.retention import TASK_NAME, erasure_state, last_run
from picobot.tasks.supervisor import TaskSupervisor

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Issued:
    """A confirmation token this API handed out, and to whom."""

    actor: Actor
    expires_at: float


class OpsRoutes:
    """Handlers for retention and purges; each takes the request and the operator actor."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        tasks: TaskSupervisor,
        privacy: PrivacyController,
        clock: Callable[[], float],
    ) -> None:
        self._db = db
        self._settings = settings
        self._tasks = tasks
        self._privacy = privacy
        self._clock = clock
        self._sessions = SessionRepo(db)
        self._issued: dict[str, _Issued] = {}

    async def retention(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``GET /api/v1/retention``: config, the recorded last run, what is expired now.

        The last run comes from ``task_runs``, so it survives restarts and includes
        runs of ``picobot retention run``; ``expired_now`` is what a run would delete now.
        """
        read_query(request, m.NoQuery)
        cfg = self._settings.session.retention
        run = await last_run(self._db, TASK_NAME)
        erasure = await erasure_state(self._db, cfg.erase_interval_secs)
        cutoff = self._clock() - cfg.max_age_days * DAY
        expired = await PurgeStore(self._db).count_older(cutoff)
        last = None
        if run is not None:
            last = pm.RetentionRun(
                started_at=run.last_started_at,
                finished_at=run.last_finished_at,
                ok=run.ok,
                unfinished=run.unfinished,
                result=run.result,
                error=run.error,
            )
        return json_response(
            pm.Retention(
                config=pm.RetentionConfig(
                    max_age_days=cfg.max_age_days,
                    cleanup_interval_secs=cfg.cleanup_interval_secs,
                    erase_interval_secs=cfg.erase_interval_secs,
                    batch_size=self._settings.privacy.retention_batch_size,
                ),
                last_run=last,
                erasure=pm.Erasure(
                    last_erased_at=erasure.last_erased_at,
                    residue_waiting_since=erasure.waiting_since,
                    erase_due=erasure.due,
                    purge_residue_since=erasure.purge_residue_since,
                ),
                scheduled=TASK_NAME in self._tasks.status(),
                cutoff=cutoff,
                expired_now=pm.counts(expired),
            )
        )

    async def purge(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``POST /api/v1/purge``: plan a purge; its token confirms it (same key only)."""
        read_query(request, m.NoQuery)
        body = await read_model(request, pm.PurgeRequest)
        scope = await self._scope(body.root)
        pending = await self._privacy.request(scope, actor)
        # The controller keeps one pending purge per actor (a new plan replaces the
        # old); this table follows. Only the caller's entry goes: another key's
        # expired token must keep answering 410, and the table still holds at most
        # one entry per key.
        self._issued = {t: i for t, i in self._issued.items() if i.actor != actor}
        extra = {"users": scope.users} if isinstance(scope, FactsScope) else {}
        plan = pm.plan(body, pending.plan.counts, pending.plan.prompt(), **extra)
        if pending.plan.counts.total == 0:
            return json_response(pm.PurgePlan(confirm_token=None, plan=plan, expires_at=None))
        self._issued[pending.token] = _Issued(actor, pending.expires_at)
        log.info("admin %s planned a purge of %s", actor.id, loggable(scope.describe()))
        return json_response(
            pm.PurgePlan(confirm_token=pending.token, plan=plan, expires_at=pending.expires_at)
        )

    async def _scope(self, body: pm.AnyPurge) -> PurgeScope:
        """The scope a validated purge body names (facts: the ids chosen now)."""
        if isinstance(body, pm.SessionPurge):
            # A typo must not read as "nothing to delete".
            if await self._sessions.get(body.session_id) is None:
                raise ApiError(404, "not_found", "No such session.")
            return SessionScope(body.session_id)
        if isinstance(body, pm.UserPurge):
            return UserScope(body.user_id)
        if isinstance(body, pm.FactsPurge):
            return await choose_facts(self._db, body.where(tuple(body.ids)))
        return OlderThanScope(body.days)

    async def confirm(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``POST /api/v1/purge/{token}/confirm {answer}``: y/yes executes, else cancels."""
        read_query(request, m.NoQuery)
        body = await read_model(request, pm.ConfirmRequest)
        token = request.match_info["token"]
        issued = self._issued.get(token)
        # Another key's token is answered exactly like an unknown one.
        if issued is None or issued.actor != actor:
            raise ApiError(404, "not_found", "No pending purge with that token.")
        # Single use: gone before the first await, so a concurrent confirm finds nothing.
        del self._issued[token]
        try:
            result = await self._privacy.confirm(token, actor, body.answer)
        except UserError:
            if self._clock() > issued.expires_at:
                raise ApiError(
                    410, "expired", "The confirmation expired; nothing was deleted."
                ) from None
            raise ApiError(404, "not_found", "No pending purge with that token.") from None
        if result is None:
            log.info("admin %s cancelled a purge", actor.id)
            return json_response(pm.PurgeCancelled(cancelled=True))
        return json_response(
            pm.PurgeDone(
                deleted=pm.counts(result.counts),
                duration_secs=result.duration_secs,
                summary=result.summary(),
            )
        )
