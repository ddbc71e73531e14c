"""The Overview, Purge and Export pages.

A purge is the same two-step exchange as everywhere else: the plan shows the exact
counts, only a confirmation with the plan's single-use token executes it, through the
:class:`PrivacyController` (which logs scope, actor and counts). After it runs, the page
counts the scope again and reads the erasure record, so the operator sees that nothing
of it is left rather than being told so.
"""

from __future__ import annotations

import logging
from dataclasses import fields

from aiohttp import web

from picobot.admin.routes_data import stream_export
from picobot.dashboard.context import Context, form_text
from picobot.dashboard.guard import Guard
from picobot.dashboard.session import Login
from picobot.errors import UserError
from picobot.logsafe import loggable
from picobot.numbers import parse_digits
from picobot.privacy.message_scope import message_scope
from picobot.privacy.scopes import (
    MAX_PURGE_DAYS,
    OlderThanScope,
    PurgeScope,
    SessionScope,
    UserScope,
)
from picobot.store.erasure.purge import PurgeCounts
from picobot.store.overview import store_counts
from picobot.store.task_runs import TASK_NAME, erasure_state, last_run

log = logging.getLogger(__name__)

RECENT_EVENTS = 25
STATUS_JOBS = ("retention", "summarize", "learn", "fact-decay", "search-index")


def _scope(kind: str, target: str) -> PurgeScope:
    """The scope named by the purge form; UserError for a bad one."""
    if not target:
        raise UserError(
            "Name what to purge: a session id, a user id, a message id or a number of days."
        )
    if kind == "session":
        return SessionScope(target)
    if kind == "user":
        return UserScope(target)
    if kind == "older":
        days = parse_digits(target)
        if days is None or not 1 <= days <= MAX_PURGE_DAYS:
            raise UserError(f"The number of days must be from 1 to {MAX_PURGE_DAYS}.")
        return OlderThanScope(days)
    raise UserError("Choose what to purge: a session, a user, or data older than N days.")


class OpsViews:
    """Handlers of the Overview, Purge and Export pages."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def routes(self, guard: Guard) -> list[web.RouteDef]:
        """These pages' routes, each behind the guard."""
        p, a = guard.page, guard.action
        return [
            web.get("/admin/", p(self.overview), allow_head=False),
            web.get("/admin/purge", p(self.purge_form), allow_head=False),
            web.post("/admin/purge", a(self.plan)),
            web.post("/admin/purge/confirm", a(self.confirm)),
            web.get("/admin/export", p(self.export), allow_head=False),
        ]

    async def overview(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``GET /admin/``: counts, retention, background jobs, recent events."""
        db = self._ctx.db
        counts = await db.read(store_counts)
        retention = self._ctx.settings.session.retention
        run = await last_run(db, TASK_NAME)
        erasure = await erasure_state(db, retention.erase_interval_secs)

        events = await self._ctx.services.events.recent(RECENT_EVENTS)
        status = self._ctx.tasks.status()
        jobs = [status[name] for name in STATUS_JOBS if name in status]
        values = {
            "counts": counts,
            "run": run,
            "erasure": erasure,
            "jobs": jobs,
            "events": events,
            "retention_days": retention.max_age_days,
            "learning": self._ctx.learning,
        }
        return self._ctx.render(request, login, "overview.html", values)

    # --- purge -----------------------------------------------------------------------------

    async def purge_form(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``GET /admin/purge``: the form (prefilled from ``?scope=&target=``)."""
        values = {
            "scope": request.query.get("scope", "session"),
            "target": request.query.get("target", ""),
            "error": None,
        }
        return self._ctx.render(request, login, "purge.html", values)

    async def plan(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``POST /admin/purge``: count what would be deleted and ask to confirm."""
        form = await request.post()
        kind, target = form_text(form, "scope"), form_text(form, "target")
        try:
            if kind == "message":
                scope = await self._message(target)
            else:
                scope = _scope(kind, target)
            if isinstance(scope, SessionScope):
                # A typo must not read as "nothing to delete".
                scope = await self._ctx.services.purges.existing_session(target)
        except UserError as exc:
            again = {"scope": kind, "target": target, "error": str(exc)}
            return self._ctx.render(request, login, "purge.html", again, status=400)
        pending = await self._ctx.services.purges.request(scope, login.actor)
        # The target is what the operator typed: escaped, so it cannot forge a log line.
        log.info("dashboard: %s planned a purge of %s", login.actor.id, loggable(scope.describe()))
        values = {"pending": pending, "counts": _rows(pending.plan.counts), "scope": scope}
        return self._ctx.render(request, login, "purge_confirm.html", values)

    async def _message(self, target: str) -> PurgeScope:
        """The scope of one message named by its id (UserError: no such message)."""
        n = parse_digits(target)
        if n is None or n < 1:
            raise UserError("A message id is a number, as the session's timeline shows.")
        return await message_scope(self._ctx.db, n, own=False)

    async def confirm(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``POST /admin/purge/confirm`` with the token and ``answer``: execute or cancel."""
        form = await request.post()
        token, answer = form_text(form, "token"), form_text(form, "answer")
        result = await self._ctx.services.purges.confirm(token, login.actor, answer)
        if result is None:
            return self._ctx.render(request, login, "purge_done.html", {"result": None})
        left = await self._ctx.services.purges.still_stored(result.scope, login.actor)
        erasure = await erasure_state(
            self._ctx.db, self._ctx.settings.session.retention.erase_interval_secs
        )
        values = {
            "result": result,
            "deleted": _rows(result.counts),
            "left": left,
            "erased": erasure.purge_residue_since is None,
        }
        return self._ctx.render(request, login, "purge_done.html", values)

    # --- export ----------------------------------------------------------------------------

    async def export(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``GET /admin/export?user=``: the user's JSONL export as a download, or the form."""
        user = request.query.get("user", "").strip()
        if not user:
            return self._ctx.render(request, login, "export.html", {"user": "", "error": None})
        export = self._ctx.services.export
        if (await export.count(user)).empty:
            values = {"user": user, "error": "Nothing is stored about this user."}
            return self._ctx.render(request, login, "export.html", values, status=404)
        log.info("dashboard: %s exporting data of %s", login.actor.id, loggable(user))
        return await stream_export(request, export, user)


def _rows(counts: PurgeCounts) -> list[tuple[str, int]]:
    """The counts as (kind, number) rows for a table, every kind shown."""
    return [(f.name.replace("_", " "), int(getattr(counts, f.name))) for f in fields(counts)]
