"""Admin API routes over learned facts: list, show, create, change, delete.

Everything goes through the fact service (:mod:`picobot.services.facts`), as the CLI
and the dashboard do: the lifecycle rules apply, text is redacted by the store, and
each change is recorded in the fact's history with the operator's id
(``api:<key prefix>``) as the actor; an unknown category is refused, a text longer
than 40 words is cut to 40. Bulk deletes are purges (scope ``facts`` of
``POST /api/v1/purge``), with their two steps.
"""

from __future__ import annotations

import logging

from aiohttp import web

from picobot.admin import fact_models as fm
from picobot.admin.http import ApiError, json_response, read_model, read_query
from picobot.admin.models import NoQuery
from picobot.logsafe import loggable
from picobot.numbers import parse_digits
from picobot.privacy.scopes import Actor
from picobot.services.facts import FactService
from picobot.store.learned.facts import FactFilter

log = logging.getLogger(__name__)


def _fact_id(request: web.Request) -> int:
    raw = request.match_info["id"]
    # Anything but a plain number names no fact (not a 400: ids are opaque to clients).
    fact_id = parse_digits(raw)
    if fact_id is None or fact_id < 1:
        raise ApiError(404, "not_found", "No such fact.")
    return fact_id


class FactRoutes:
    """Handlers for the fact routes; each takes the request and the operator actor."""

    def __init__(self, facts: FactService) -> None:
        self._facts = facts

    async def list_facts(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``GET /api/v1/facts?user=&subject=&category=&active=&pinned=&min_confidence=
        &max_confidence=&text=&limit=&cursor=``, newest first."""
        params = read_query(request, fm.FactsQuery)
        where = params.where()
        before = None if params.cursor is None else int(params.cursor)
        facts, last = await self._facts.page(where, params.limit, before)
        return json_response(
            fm.FactList(
                facts=[fm.Fact.model_validate(f) for f in facts],
                limit=params.limit,
                next_cursor=None if last is None else str(last),
            )
        )

    async def get_fact(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``GET /api/v1/facts/{id}``: the fact, its sources and its history."""
        read_query(request, NoQuery)
        fact_id = _fact_id(request)
        found = await self._facts.detail(fact_id)
        if found is None:
            raise ApiError(404, "not_found", "No such fact.")
        fact, sources, history = found
        return json_response(
            fm.FactDetail(
                fact=fm.Fact.model_validate(fact),
                sources=[fm.FactSource.model_validate(s) for s in sources],
                history=[fm.FactChange.model_validate(h) for h in history],
            )
        )

    async def create_fact(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``POST /api/v1/facts {user_id, category, subject?, text, confidence?}``: 201."""
        read_query(request, NoQuery)
        body = await read_model(request, fm.FactCreate)
        fact = await self._facts.create(
            body.user_id,
            subject=body.subject,
            category=body.category,
            text=body.text,
            confidence=body.confidence,
            actor=actor.id,
        )
        # Ids and owner only: a fact's text is user data a purge must be able to erase.
        log.info(
            "fact change by %s: created fact %d of %s", actor.id, fact.id, loggable(fact.user_id)
        )
        return json_response(fm.Fact.model_validate(fact), status=201)

    async def update_fact(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``PATCH /api/v1/facts/{id} {text?, confidence?, active?, pinned?}``."""
        read_query(request, NoQuery)
        fact_id = _fact_id(request)
        body = await read_model(request, fm.FactUpdate)
        fact = await self._facts.edit(
            fact_id,
            text=body.text,
            confidence=body.confidence,
            active=body.active,
            pinned=body.pinned,
            actor=actor.id,
        )
        if fact is None:
            raise ApiError(404, "not_found", "No such fact.")
        log.info(
            "fact change by %s: updated fact %d of %s", actor.id, fact_id, loggable(fact.user_id)
        )
        return json_response(fm.Fact.model_validate(fact))

    async def delete_fact(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``DELETE /api/v1/facts/{id}``: 204, with its sources and history."""
        read_query(request, NoQuery)
        fact_id = _fact_id(request)
        deleted = await self._facts.delete(FactFilter(ids=(fact_id,)), actor=actor.id)
        if not deleted:
            raise ApiError(404, "not_found", "No such fact.")
        log.info("fact change by %s: deleted fact %d", actor.id, fact_id)
        return web.Response(status=204)
