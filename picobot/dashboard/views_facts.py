"""The Facts and memories page: filter, edit inline, delete with confirmation, bulk actions.

The listings refresh themselves every few seconds (htmx polling of the row fragments,
each poll reading only its own listing; the page script pauses it while a row is being
edited or rows are selected). Edits go through the fact service (the rules of the
CLI and the admin API), memory deletions
through the notes service, and fact deletions are purges of the chosen ids through
the purge service (plan, confirm with its token, erase the residue), all
with the operator as the actor, and are logged with ids and counts, never a fact's
text or a memory's key. Without JavaScript the same links and forms work as whole pages.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

from aiohttp import web
from multidict import MultiMapping

from picobot.dashboard.context import Context, form_text
from picobot.dashboard.guard import Guard, is_htmx
from picobot.dashboard.render import see_other
from picobot.dashboard.session import Login
from picobot.errors import UserError
from picobot.logsafe import loggable
from picobot.numbers import parse_digits
from picobot.store.conversation.memories import Memory
from picobot.store.learned.facts import Fact, FactFilter

log = logging.getLogger(__name__)

LISTING = "/admin/facts"
LIST_LIMIT = 500
"""Most facts (and memories) one listing shows."""
POLL_SECS = 3
FACT_ID = "{id:[0-9]+}"
"""A fact id in a route: ASCII digits only (``\\d`` would take any script's digits)."""
MAX_SELECTED = LIST_LIMIT
"""Most facts one bulk action takes (all a listing shows): a larger selection is
refused, never cut."""


@dataclass(frozen=True, slots=True)
class Filters:
    """The listing's filters as the operator typed them, and the FactFilter they mean."""

    values: dict[str, str]
    where: FactFilter
    error: str | None

    @property
    def query(self) -> str:
        """The filters as a query string (for links back to the same listing)."""
        return urlencode({k: v for k, v in self.values.items() if v})


def _confidence(raw: str, name: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number from 0 to 1, not {raw!r}.") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be between 0 and 1, not {raw!r}.")
    return value


def read_filters(query: Mapping[str, str]) -> Filters:
    """The filters of a listing's query string; a bad one is reported and left out."""
    names = ("user", "subject", "category", "active", "min", "max", "text")
    values = {n: query.get(n, "").strip() for n in names}
    errors: list[str] = []
    bounds: dict[str, float | None] = {"min": None, "max": None}
    for name, label in (("min", "Minimum confidence"), ("max", "Maximum confidence")):
        if values[name]:
            try:
                bounds[name] = _confidence(values[name], label)
            except ValueError as exc:
                errors.append(str(exc))
    active = {"yes": True, "no": False}.get(values["active"])
    where = FactFilter(
        user_id=values["user"] or None,
        subject=values["subject"] or None,
        category=values["category"] or None,
        active=active,
        min_confidence=bounds["min"],
        max_confidence=bounds["max"],
        text=values["text"] or None,
    )
    return Filters(values, where, " ".join(errors) or None)


def selected_ids(form: MultiMapping[str | bytes | object]) -> tuple[int, ...]:
    """The fact ids a form selects, each once; UserError for one that is not a fact id
    or for more than :data:`MAX_SELECTED` (nothing is done with a bad selection)."""
    values = form.getall("ids", [])
    if len(values) > MAX_SELECTED:
        raise UserError(
            f"Select at most {MAX_SELECTED} facts at once ({len(values)} were selected);"
            " narrow the filters, or purge the user. Nothing was changed."
        )
    found: list[int] = []
    for value in values:
        fact_id = parse_digits(value.strip()) if isinstance(value, str) else None
        if fact_id is None or fact_id < 1:
            raise UserError("Fact ids are whole numbers of at most 18 digits. Nothing was changed.")
        found.append(fact_id)
    return tuple(dict.fromkeys(found))


def local_listing(value: str) -> bool:
    """Whether ``value`` is the facts listing of this site, with filters at most: a
    path and a query of printable ASCII (no CR/LF to split a header, no space or
    backslash), no scheme, host or fragment."""
    if not value.isascii() or not value.isprintable() or " " in value or "\\" in value:
        return False
    parts = urlsplit(value)
    return (parts.scheme, parts.netloc, parts.path, parts.fragment) == ("", "", LISTING, "")


def _back(form: Mapping[str, object]) -> str:
    """Where to go after an action: the listing with its filters, as the page sent it;
    anything else (another site, a header's line break) goes to the plain listing."""
    back = form.get("back")
    if isinstance(back, str) and local_listing(back):
        return back
    return LISTING


class FactViews:
    """Handlers of the Facts and memories page."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def routes(self, guard: Guard) -> list[web.RouteDef]:
        """This page's routes, each behind the guard."""
        p, a = guard.page, guard.action
        return [
            web.get("/admin/facts", p(self.page), allow_head=False),
            web.get("/admin/facts/rows", p(self.rows), allow_head=False),
            web.get("/admin/memories/rows", p(self.memory_rows), allow_head=False),
            web.get(f"/admin/facts/{FACT_ID}/edit", p(self.edit), allow_head=False),
            web.get(f"/admin/facts/{FACT_ID}/row", p(self.row), allow_head=False),
            web.post(f"/admin/facts/{FACT_ID}", a(self.update)),
            web.get(f"/admin/facts/{FACT_ID}/delete", p(self.ask_one), allow_head=False),
            web.post(f"/admin/facts/{FACT_ID}/delete", a(self.confirm_one)),
            web.post("/admin/facts/bulk", a(self.bulk)),
            web.post("/admin/facts/delete", a(self.delete)),
            web.get("/admin/memories/delete", p(self.confirm_memory), allow_head=False),
            web.post("/admin/memories/delete", a(self.delete_memory)),
        ]

    async def _facts(self, filters: Filters) -> list[Fact]:
        return await self._ctx.services.facts.find(filters.where, LIST_LIMIT)

    async def _memories(self, filters: Filters) -> list[Memory]:
        user = filters.values["user"] or None
        return await self._ctx.services.notes.all(user, LIST_LIMIT)

    async def page(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``GET /admin/facts``: the whole page."""
        filters = read_filters(request.query)
        values = {
            "filters": filters,
            "facts": await self._facts(filters),
            "memories": await self._memories(filters),
            "poll": POLL_SECS,
            "limit": LIST_LIMIT,
        }
        return self._ctx.render(request, login, "facts.html", values)

    async def rows(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``GET /admin/facts/rows``: the fact rows (what the page polls)."""
        filters = read_filters(request.query)
        facts = await self._facts(filters)
        values = {"filters": filters, "facts": facts, "poll": POLL_SECS, "limit": LIST_LIMIT}
        return self._ctx.render(request, login, "_fact_rows.html", values)

    async def memory_rows(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``GET /admin/memories/rows``: the memory rows (what the page polls)."""
        filters = read_filters(request.query)
        values = {"filters": filters, "memories": await self._memories(filters), "poll": POLL_SECS}
        return self._ctx.render(request, login, "_memory_rows.html", values)

    async def _fact(self, request: web.Request) -> Fact:
        fact_id = parse_digits(request.match_info["id"])
        if fact_id is None:  # the route takes ASCII digits; this bounds their number
            raise web.HTTPNotFound(text="No such fact (it may have been deleted).")
        fact = await self._ctx.services.facts.get(fact_id)
        if fact is None:
            raise web.HTTPNotFound(text="No such fact (it may have been deleted).")
        return fact

    async def edit(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``GET /admin/facts/{id}/edit``: the inline edit row (htmx) or an edit page."""
        fact = await self._fact(request)
        values = {"fact": fact, "back": _back(request.query), "error": None}
        name = "_fact_edit.html" if is_htmx(request) else "fact_edit.html"
        return self._ctx.render(request, login, name, values)

    async def row(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``GET /admin/facts/{id}/row``: one fact's row (the edit's Cancel)."""
        fact = await self._fact(request)
        return self._ctx.render(request, login, "_fact_row.html", {"fact": fact})

    async def update(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``POST /admin/facts/{id}``: new text, confidence and active flag."""
        fact = await self._fact(request)
        form = await request.post()
        actor = login.actor.id
        try:
            confidence = _confidence(form_text(form, "confidence"), "Confidence")
            # The fact service checks the text as the CLI and the admin API do.
            updated = await self._ctx.services.facts.edit(
                fact.id,
                text=form_text(form, "text"),
                confidence=confidence,
                active=form_text(form, "active") == "yes",
                actor=actor,
            )
        except (ValueError, UserError) as exc:
            values = {"fact": fact, "back": _back(form), "error": str(exc)}
            name = "_fact_edit.html" if is_htmx(request) else "fact_edit.html"
            return self._ctx.render(request, login, name, values, status=400)
        if updated is None:
            raise web.HTTPNotFound(text="No such fact (it may have been deleted).")
        log.info("fact change by %s: updated fact %d of %s", actor, fact.id, loggable(fact.user_id))
        if is_htmx(request):
            return self._ctx.render(request, login, "_fact_row.html", {"fact": updated})
        return see_other(_back(form))

    async def ask_one(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``GET /admin/facts/{id}/delete``: the fact and a button that asks to delete it.

        A GET changes nothing (an ``<img>`` on another site must not plan a purge or
        cancel the operator's pending one): the plan is made by the POST below."""
        fact = await self._fact(request)
        values = {"facts": [fact], "back": _back(request.query), "token": None, "timeout": 0}
        return self._ctx.render(request, login, "fact_delete.html", values)

    async def confirm_one(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``POST /admin/facts/{id}/delete``: are you sure? (the plan and its token)"""
        fact = await self._fact(request)
        form = await request.post()
        return await self._ask(request, login, (fact.id,), _back(form))

    async def _ask(
        self, request: web.Request, login: Login, ids: tuple[int, ...], back: str
    ) -> web.StreamResponse:
        """The confirmation page of deleting ``ids``: a purge plan of exactly the facts
        that exist now, shown by text, and the token that confirms it."""
        services = self._ctx.services
        scope = await services.facts.choose(FactFilter(ids=ids))
        if not scope.ids:
            raise web.HTTPNotFound(text="None of the selected facts exists any more.")
        pending = await services.purges.request(scope, login.actor)
        facts = await services.facts.find(FactFilter(ids=scope.ids), None)
        values = {
            "facts": facts,
            "back": back,
            "token": pending.token,
            "timeout": self._ctx.settings.privacy.confirmation_timeout_secs,
        }
        return self._ctx.render(request, login, "fact_delete.html", values)

    async def bulk(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``POST /admin/facts/bulk``: deactivate or activate now; delete after a confirmation."""
        form = await request.post()
        ids = selected_ids(form)
        action = form_text(form, "action")
        if not ids:
            return self._ctx.render(
                request, login, "error.html", {"message": "Select at least one fact."}, status=400
            )
        if action == "delete":
            return await self._ask(request, login, ids, _back(form))
        if action not in ("deactivate", "activate"):
            return self._ctx.render(
                request, login, "error.html", {"message": "Unknown action."}, status=400
            )
        changed = 0
        for fact_id in ids:
            done = await self._ctx.services.facts.edit(
                fact_id, active=action == "activate", actor=login.actor.id
            )
            changed += done is not None
        log.info("fact change by %s: %sd %d facts", login.actor.id, action, changed)
        return see_other(_back(form))

    async def delete(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``POST /admin/facts/delete`` with the plan's ``token`` and ``confirm=yes``:
        purge exactly the facts the plan counted (without ``confirm=yes``: cancel it).

        A confirmation with an unknown, used, expired or other operator's token deletes
        nothing and is answered with an error page (the controller's UserError); a
        cancel of one just goes back (there is nothing left to cancel)."""
        form = await request.post()
        token, back = form_text(form, "token"), _back(form)
        if form_text(form, "confirm") != "yes":
            with contextlib.suppress(UserError):
                await self._ctx.services.purges.confirm(token, login.actor, "no")
            return see_other(back)
        result = await self._ctx.services.purges.confirm(token, login.actor, "yes")
        if result is not None:
            log.info("fact change by %s: deleted %d facts", login.actor.id, result.counts.facts)
        return see_other(back)

    # --- memories ----------------------------------------------------------------------

    def _memory_target(self, source: Mapping[str, object]) -> tuple[str, str]:
        user, key = source.get("user"), source.get("key")
        if not isinstance(user, str) or not user or not isinstance(key, str) or not key:
            raise web.HTTPBadRequest(text="Name the user and the memory key.")
        return user, key

    async def confirm_memory(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``GET /admin/memories/delete?user=&key=``: are you sure?"""
        user, key = self._memory_target(request.query)
        memory = await self._ctx.services.notes.get_of(user, key)
        if memory is None:
            raise web.HTTPNotFound(text="No such memory (it may have been deleted).")
        return self._ctx.render(request, login, "memory_delete.html", {"memory": memory})

    async def delete_memory(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``POST /admin/memories/delete`` with user, key and ``confirm=yes``."""
        form = await request.post()
        user, key = self._memory_target(form)
        actor, now = login.actor.id, self._ctx.clock()
        confirmed = form_text(form, "confirm") == "yes"
        if confirmed and await self._ctx.services.notes.remove(user, key, actor=actor, now=now):
            # Never the key: it is user data (a purge must be able to erase it).
            log.info("memory change by %s: deleted a memory of %s", actor, loggable(user))
        return see_other("/admin/facts")
