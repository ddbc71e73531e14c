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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from picobot.admin.http import (
    ApiError,
    counts_json,
    iso,
    json_response,
    query,
    read_json,
    user_id_value,
)
from picobot.config.settings import Settings
from picobot.errors import UserError
from picobot.privacy.controller import (
    DAY,
    MAX_PURGE_DAYS,
    Actor,
    OlderThanScope,
    PrivacyController,
    PurgeScope,
    SessionScope,
    UserScope,
)
from picobot.store.db import Database
from picobot.store.purge import PurgeStore
from picobot.store.sessions import SessionRepo
from picobot.tasks.retention import TASK_NAME, erasure_state, last_run
from picobot.tasks.supervisor import TaskSupervisor

log = logging.getLogger(__name__)

_TARGET = {"session": "session_id", "user": "user_id", "older_than": "days"}


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
        query(request, frozenset())
        cfg = self._settings.session.retention
        run = await last_run(self._db, TASK_NAME)
        erasure = await erasure_state(self._db, cfg.erase_interval_secs)
        cutoff = self._clock() - cfg.max_age_days * DAY
        expired = await PurgeStore(self._db).count_older(cutoff)
        last: dict[str, Any] | None = None
        if run is not None:
            last = {
                "started_at": iso(run.last_started_at),
                "finished_at": iso(run.last_finished_at),
                "ok": run.ok,
                "unfinished": run.unfinished,
                "result": run.result,
                "error": run.error,
            }
        return json_response(
            {
                "config": {
                    "max_age_days": cfg.max_age_days,
                    "cleanup_interval_secs": cfg.cleanup_interval_secs,
                    "erase_interval_secs": cfg.erase_interval_secs,
                    "batch_size": self._settings.privacy.retention_batch_size,
                },
                "last_run": last,
                "erasure": {
                    "last_erased_at": iso(erasure.last_erased_at),
                    "residue_waiting_since": iso(erasure.waiting_since),
                    "erase_due": iso(erasure.due),
                    "purge_residue_since": iso(erasure.purge_residue_since),
                },
                "scheduled": TASK_NAME in self._tasks.status(),
                "cutoff": iso(cutoff),
                "expired_now": counts_json(expired),
            }
        )

    async def purge(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``POST /api/v1/purge``: plan a purge; its token confirms it (same key only)."""
        query(request, frozenset())
        body = await read_json(
            request,
            {"scope": str, "session_id": str, "user_id": str, "days": int},
            frozenset({"scope"}),
        )
        scope, target = await self._scope(body)
        pending = await self._privacy.request(scope, actor)
        # The controller keeps one pending purge per actor (a new plan replaces the
        # old); this table follows. Only the caller's entry goes: another key's
        # expired token must keep answering 410, and the table still holds at most
        # one entry per key.
        self._issued = {t: i for t, i in self._issued.items() if i.actor != actor}
        plan = {
            **target,
            "counts": counts_json(pending.plan.counts),
            "prompt": pending.plan.prompt(),
        }
        if pending.plan.counts.total == 0:
            return json_response({"confirm_token": None, "plan": plan, "expires_at": None})
        self._issued[pending.token] = _Issued(actor, pending.expires_at)
        log.info("admin %s planned a purge of %s", actor.id, scope.describe())
        return json_response(
            {"confirm_token": pending.token, "plan": plan, "expires_at": iso(pending.expires_at)}
        )

    async def _scope(self, body: Mapping[str, Any]) -> tuple[PurgeScope, dict[str, Any]]:
        """The scope a purge body names; exactly its one target field is allowed."""
        kind = body["scope"]
        if kind not in _TARGET:
            raise ApiError(400, "invalid_field", "'scope' must be session, user or older_than.")
        field = _TARGET[kind]
        if set(body) - {"scope", field}:
            raise ApiError(400, "unknown_field", f"Scope {kind} takes only {field!r}.")
        if field not in body:
            raise ApiError(400, "missing_field", f"Scope {kind} needs {field!r}.")
        value = body[field]
        if kind == "session":
            # A typo must not read as "nothing to delete".
            if await self._sessions.get(value) is None:
                raise ApiError(404, "not_found", "No such session.")
            return SessionScope(value), {"scope": kind, "session_id": value}
        if kind == "user":
            user = user_id_value(value, "user_id")
            return UserScope(user), {"scope": kind, "user_id": user}
        if not 1 <= value <= MAX_PURGE_DAYS:
            raise ApiError(400, "invalid_field", f"'days' must be between 1 and {MAX_PURGE_DAYS}.")
        return OlderThanScope(value), {"scope": kind, "days": value}

    async def confirm(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``POST /api/v1/purge/{token}/confirm {answer}``: y/yes executes, else cancels."""
        query(request, frozenset())
        body = await read_json(request, {"answer": str}, frozenset({"answer"}))
        token = request.match_info["token"]
        issued = self._issued.get(token)
        # Another key's token is answered exactly like an unknown one.
        if issued is None or issued.actor != actor:
            raise ApiError(404, "not_found", "No pending purge with that token.")
        # Single use: gone before the first await, so a concurrent confirm finds nothing.
        del self._issued[token]
        try:
            result = await self._privacy.confirm(token, actor, body["answer"])
        except UserError:
            if self._clock() > issued.expires_at:
                raise ApiError(
                    410, "expired", "The confirmation expired; nothing was deleted."
                ) from None
            raise ApiError(404, "not_found", "No pending purge with that token.") from None
        if result is None:
            log.info("admin %s cancelled a purge", actor.id)
            return json_response({"cancelled": True})
        return json_response(
            {
                "deleted": counts_json(result.counts),
                "duration_secs": result.duration_secs,
                "summary": result.summary(),
            }
        )
