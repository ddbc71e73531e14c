"""Admin API routes over stored data: sessions, messages, memories, search, export.

Everything goes through the runtime's services (this module holds no SQL). Memory
writes follow the notes service's rules, the chat commands' (the key and content
rules, the per-user cap; the store redacts).
"""

from __future__ import annotations

import logging
import re
import time

from aiohttp import web

from picobot.admin import models as m
from picobot.admin.http import (
    ApiError,
    StreamAborted,
    json_response,
    read_model,
    read_query,
    user_id_value,
)
from picobot.errors import UserError
from picobot.logsafe import loggable
from picobot.privacy.scopes import Actor
from picobot.services.bundle import Services
from picobot.services.export import ExportService
from picobot.services.search import SearchFilter, parse_kinds, parse_since
from picobot.store.conversation.memories import Memory

log = logging.getLogger(__name__)

EXPORT_CHUNK_BYTES = 64 * 1024
"""Export lines are written to the socket in chunks of about this size."""


def _filename(user_id: str) -> str:
    # User ids hold ':' and '@'; a download name keeps only portable characters.
    return "picobot-export-" + re.sub(r"[^A-Za-z0-9._-]", "_", user_id)[:80] + ".jsonl"


class DataRoutes:
    """Handlers for the data routes; each takes the request and the operator actor."""

    def __init__(self, services: Services) -> None:
        self._sessions = services.sessions
        self._notes = services.notes
        self._search = services.search
        self._export = services.export

    # --- sessions ------------------------------------------------------------------------

    async def list_sessions(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``GET /api/v1/sessions?user=&limit=&offset=``, most recently active first."""
        params = read_query(request, m.SessionsQuery)
        page = await self._sessions.page(params.user, limit=params.limit, offset=params.offset)
        return json_response(
            m.SessionList(
                sessions=[m.Session.model_validate(s) for s in page.sessions],
                limit=params.limit,
                offset=params.offset,
                next_offset=page.next_offset,
            )
        )

    async def get_session(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``GET /api/v1/sessions/{id}?limit=&before_seq=``: the session and a message page.

        The page is the ``limit`` messages just before ``before_seq`` (default: the
        newest), oldest first; ``next_before_seq`` fetches the page before it.
        """
        params = read_query(request, m.SessionQuery)
        info = await self._sessions.get(request.match_info["id"])
        if info is None:
            raise ApiError(404, "not_found", "No such session.")
        page = await self._sessions.messages_before(
            info.id, limit=params.limit, before_seq=params.before_seq
        )
        return json_response(
            m.SessionDetail(
                session=m.Session.model_validate(info),
                messages=[m.Message.model_validate(msg) for msg in page.messages],
                next_before_seq=page.next_before_seq,
            )
        )

    # --- memories --------------------------------------------------------------------------

    async def list_memories(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``GET /api/v1/users/{user_id}/memories``, most recently updated first."""
        read_query(request, m.NoQuery)
        user = user_id_value(request.match_info["user_id"], "user_id")
        memories = await self._notes.list_of(user)
        return json_response(
            m.MemoryList(user_id=user, memories=[m.Memory.model_validate(x) for x in memories])
        )

    async def create_memory(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``POST /api/v1/users/{user_id}/memories {key, content}``: 201, 409 if it exists."""
        read_query(request, m.NoQuery)
        user = user_id_value(request.match_info["user_id"], "user_id")
        body = await read_model(request, m.MemoryCreate)
        key, content = self._validated(body.key, body.content)
        # Checked before the upsert: an operator creating a key must not silently
        # overwrite what the user saved (PUT is the explicit overwrite).
        if await self._notes.get_of(user, key) is not None:
            raise ApiError(409, "exists", f"Memory {key!r} already exists; use PUT to change it.")
        memory = await self._save(user, key, content, actor)
        log.info("admin %s created memory %r of %s", actor.id, key, loggable(user))
        return json_response(m.Memory.model_validate(memory), status=201)

    async def update_memory(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``PUT /api/v1/users/{user_id}/memories/{key} {content}``: 200, 404 if missing."""
        read_query(request, m.NoQuery)
        user = user_id_value(request.match_info["user_id"], "user_id")
        body = await read_model(request, m.MemoryUpdate)
        key, content = self._validated(request.match_info["key"], body.content)
        if await self._notes.get_of(user, key) is None:
            raise ApiError(404, "not_found", f"No memory {key!r}; create it with POST.")
        memory = await self._save(user, key, content, actor)
        log.info("admin %s updated memory %r of %s", actor.id, key, loggable(user))
        return json_response(m.Memory.model_validate(memory))

    async def delete_memory(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``DELETE /api/v1/users/{user_id}/memories/{key}``: 204, 404 if missing."""
        read_query(request, m.NoQuery)
        user = user_id_value(request.match_info["user_id"], "user_id")
        key = request.match_info["key"]
        if not await self._notes.remove(user, key, actor=actor.id):
            raise ApiError(404, "not_found", f"No memory {key!r}.")
        log.info("admin %s deleted memory %r of %s", actor.id, key, loggable(user))
        return web.Response(status=204)

    def _validated(self, key: str, content: str) -> tuple[str, str]:
        if not self._notes.enabled:
            raise ApiError(409, "memories_disabled", "User memories are turned off.")
        return self._notes.validated(key, content)

    async def _save(self, user: str, key: str, content: str, actor: Actor) -> Memory:
        try:
            return await self._notes.put(user, key, content, actor=actor.id)
        except UserError as exc:
            # The only refusal of save() itself is the per-user cap.
            raise ApiError(409, "limit_reached", str(exc)) from None

    # --- search and export -------------------------------------------------------------------

    async def search(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``GET /api/v1/search?user=&q=&limit=&type=&session=&since=``: one user's
        records of the kinds, session and time asked for, best match first."""
        started = time.perf_counter()
        params = read_query(request, m.SearchQuery)
        try:
            flt = SearchFilter(
                parse_kinds(params.type) if params.type is not None else SearchFilter().kinds,
                params.session,
                None if params.since is None else parse_since(params.since, time.time()),
            )
        except UserError as exc:
            raise ApiError(400, "invalid_parameter", str(exc)) from None
        # The same keyword extraction as recall and /search: stop words and FTS syntax
        # in ``q`` never reach the MATCH expression as operators.
        terms = self._search.terms(params.q)
        hits = await self._search.filtered(params.user, terms, params.limit, flt)
        took = round((time.perf_counter() - started) * 1000, 3)
        return json_response(
            m.SearchResult(
                user_id=params.user,
                terms=terms,
                hits=[m.SearchHit.model_validate(h) for h in hits],
                took_ms=took,
            )
        )

    async def export(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``GET /api/v1/users/{user_id}/export``: the JSONL export, streamed; 404 if empty.

        Once the first byte is sent the status cannot change: a failure mid-stream is
        raised, aiohttp drops the connection and the client sees a truncated body
        (an incomplete chunked response), never a short export that looks complete.
        """
        read_query(request, m.NoQuery)
        user = user_id_value(request.match_info["user_id"], "user_id")
        if (await self._export.count(user)).empty:
            raise ApiError(404, "not_found", "Nothing is stored about this user.")
        log.info("admin %s exporting data of %s", actor.id, loggable(user))
        return await stream_export(request, self._export, user)


async def stream_export(
    request: web.Request, export: ExportService, user: str
) -> web.StreamResponse:
    """Send ``user``'s JSONL export as a download (the admin API's and the dashboard's).

    Once the first byte is sent the status cannot change: a failure mid-stream is
    raised as :class:`StreamAborted`, aiohttp drops the connection and the client sees
    a truncated body (an incomplete chunked response), never a short export that
    looks complete.
    """
    response = web.StreamResponse(
        headers={
            "Content-Disposition": f'attachment; filename="{_filename(user)}"',
            # A user's entire data: no browser or proxy may keep a copy.
            "Cache-Control": "no-store",
        }
    )
    response.content_type = "application/x-ndjson"
    response.charset = "utf-8"
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        await _write_lines(response, export, user)
    except ConnectionResetError as exc:
        log.info("export of %s: the client went away", loggable(user))
        raise StreamAborted(f"export of {user}: client went away") from exc
    except Exception as exc:
        log.exception("export of %s failed mid-stream", loggable(user))
        raise StreamAborted(f"export of {user} failed mid-stream") from exc
    await response.write_eof()
    return response


async def _write_lines(response: web.StreamResponse, export: ExportService, user: str) -> None:
    buffer: list[bytes] = []
    size = 0
    async for line in export.jsonl(user):
        data = line.encode("utf-8")
        buffer.append(data)
        size += len(data)
        if size >= EXPORT_CHUNK_BYTES:
            await response.write(b"".join(buffer))
            buffer, size = [], 0
    if buffer:
        await response.write(b"".join(buffer))
