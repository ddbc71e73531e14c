"""Admin API routes for operations: retention status and the two-step purge.

A purge is planned by ``POST /api/v1/purge`` (exact counts, a confirmation token)
and executed by ``POST /api/v1/purge/{token}/confirm`` with ``{"answer": "y"}``. The
runtime's purge service holds the pending plan: single use, expiring, bound to the
requesting actor, one per actor. A late confirmation raises :class:`PurgeExpired`
(410); an unknown, used, replaced or another key's token a plain UserError (404).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web

from picobot.admin import models as m
from picobot.admin import purge_models as pm
from picobot.admin.http import ApiError, json_response, read_model, read_query
from picobot.config.settings import Settings
from picobot.errors import UserError
from picobot.logsafe import loggable
from picobot.privacy.controller import PurgeExpired
from picobot.privacy.fact_scope import FactsScope
from picobot.privacy.message_scope import message_scope
from picobot.privacy.scopes import DAY, Actor, OlderThanScope, PurgeScope, UserScope
from picobot.services.bundle import Services
from picobot.services.purges import NoSuchSession
from picobot.store.db import Database
from picobot.store.task_runs import TASK_NAME, erasure_state, last_run
from picobot.tasks.supervisor import TaskSupervisor

log = logging.getLogger(__name__)


class OpsRoutes:
    """Handlers for retention and purges; each takes the request and the operator actor."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        tasks: TaskSupervisor,
        services: Services,
        clock: Callable[[], float],
    ) -> None:
        self._db = db
        self._settings = settings
        self._tasks = tasks
        self._purges = services.purges
        self._facts = services.facts
        self._clock = clock

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
        expired = await self._purges.count_older(cutoff)
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
        return await self._plan(await read_model(request, pm.PurgeRequest), actor)

    async def delete_message(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``DELETE /api/v1/messages/{id}``: plan deleting one message (the ``message``
        scope of a purge); ``POST /api/v1/purge/{token}/confirm`` executes it."""
        read_query(request, m.NoQuery)
        raw = request.match_info["id"]
        if not raw.isascii() or not raw.isdigit() or len(raw) > 18 or int(raw) < 1:
            raise ApiError(404, "not_found", "No such message.")
        body = pm.PurgeRequest(pm.MessagePurge(scope="message", message_id=int(raw)))
        return await self._plan(body, actor)

    async def _plan(self, body: pm.PurgeRequest, actor: Actor) -> web.StreamResponse:
        scope = await self._scope(body.root)
        # One pending purge per actor: a new plan replaces the caller's old one.
        pending = await self._purges.request(scope, actor)
        extra = {"users": scope.users} if isinstance(scope, FactsScope) else {}
        plan = pm.plan(body, pending.plan.counts, pending.plan.prompt(), **extra)
        if pending.plan.counts.total == 0:
            return json_response(pm.PurgePlan(confirm_token=None, plan=plan, expires_at=None))
        log.info("admin %s planned a purge of %s", actor.id, loggable(scope.describe()))
        return json_response(
            pm.PurgePlan(confirm_token=pending.token, plan=plan, expires_at=pending.expires_at)
        )

    async def _scope(self, body: pm.AnyPurge) -> PurgeScope:
        """The scope a validated purge body names (facts: the ids chosen now)."""
        if isinstance(body, pm.SessionPurge):
            # A typo must not read as "nothing to delete".
            try:
                return await self._purges.existing_session(body.session_id)
            except NoSuchSession:
                raise ApiError(404, "not_found", "No such session.") from None
        if isinstance(body, pm.UserPurge):
            return UserScope(body.user_id)
        if isinstance(body, pm.MessagePurge):
            try:
                return await message_scope(self._db, body.message_id, own=False)
            except UserError:
                raise ApiError(404, "not_found", "No such message.") from None
        if isinstance(body, pm.FactsPurge):
            return await self._facts.choose(body.where(tuple(body.ids)))
        return OlderThanScope(body.days)

    async def confirm(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``POST /api/v1/purge/{token}/confirm {answer}``: y/yes executes, else cancels."""
        read_query(request, m.NoQuery)
        body = await read_model(request, pm.ConfirmRequest)
        token = request.match_info["token"]
        # Single use (the service drops it before its first await); another key's token
        # is answered exactly like an unknown one.
        try:
            result = await self._purges.confirm(token, actor, body.answer)
        except PurgeExpired:
            raise ApiError(
                410, "expired", "The confirmation expired; nothing was deleted."
            ) from None
        except UserError:
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
