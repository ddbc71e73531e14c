"""The Sessions page (list, search, fork ancestry), a session's timeline, and Search.

Read-only: these pages change nothing. Search uses the same keyword extraction and
index as recall, ``/search`` and the admin API.
"""

from __future__ import annotations

from dataclasses import replace

from aiohttp import web

from picobot.dashboard.context import Context
from picobot.dashboard.guard import Guard
from picobot.dashboard.session import Login
from picobot.numbers import parse_digits
from picobot.store.conversation.timeline import Timeline, TimelineItem

PAGE_SIZE = 50
SEARCH_LIMIT = 50
SHOWN_CHARS = 2000
"""Most characters of one message, tool result or argument the timeline shows."""


def _offset(raw: str) -> int:
    """The listing's offset (0 when absent); HTTPBadRequest for anything but a number."""
    if not raw:
        return 0
    offset = parse_digits(raw)
    if offset is None:
        raise web.HTTPBadRequest(text="The offset must be a whole number (at most 18 digits).")
    return offset


def shortened(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out (a long tool
    result must not make the page huge; the export has the whole text)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} … [{len(text) - limit} more characters not shown; the export has all]"


def _shown(item: TimelineItem) -> TimelineItem:
    details = {k: shortened(v) for k, v in item.details.items()}
    return replace(item, title=shortened(item.title), body=shortened(item.body), details=details)


class SessionViews:
    """Handlers of the Sessions, Timeline and Search pages."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._sessions = ctx.services.sessions
        self._search = ctx.services.search

    def routes(self, guard: Guard) -> list[web.RouteDef]:
        """This page's routes, each behind the guard."""
        p = guard.page
        return [
            web.get("/admin/sessions", p(self.sessions), allow_head=False),
            web.get("/admin/sessions/{id}", p(self.timeline), allow_head=False),
            web.get("/admin/search", p(self.search), allow_head=False),
        ]

    async def sessions(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``GET /admin/sessions?user=&q=&offset=``: sessions, most recently active first."""
        user = request.query.get("user", "").strip()
        text = request.query.get("q", "").strip()
        offset = _offset(request.query.get("offset", ""))
        found = await self._sessions.previews(
            user_id=user or None, text=text or None, limit=PAGE_SIZE + 1, offset=offset
        )
        values = {
            "sessions": found[:PAGE_SIZE],
            "user": user,
            "q": text,
            "offset": offset,
            "next_offset": offset + PAGE_SIZE if len(found) > PAGE_SIZE else None,
            "prev_offset": max(0, offset - PAGE_SIZE) if offset else None,
        }
        return self._ctx.render(request, login, "sessions.html", values)

    async def timeline(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``GET /admin/sessions/{id}``: everything that happened in the session, in order."""
        session_id = request.match_info["id"]
        info = await self._sessions.get(session_id)
        if info is None:
            raise web.HTTPNotFound(text="No such session (it may have been purged).")
        timeline = await self._sessions.timeline(session_id)
        ancestors, forks = await self._sessions.family(session_id)
        shown = Timeline([_shown(item) for item in timeline.items], timeline.truncated)
        values = {"info": info, "timeline": shown, "ancestors": ancestors, "forks": forks}
        return self._ctx.render(request, login, "timeline.html", values)

    async def search(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``GET /admin/search?user=&q=``: one user's messages and memories, best first."""
        user = request.query.get("user", "").strip()
        query = request.query.get("q", "").strip()
        terms: list[str] = []
        hits = []
        error = None
        if query and not user:
            error = "Name the user whose history to search."
        elif user and query:
            terms = self._search.terms(query)
            if terms:
                hits = await self._search.hits(user, terms, SEARCH_LIMIT)
            else:
                error = "Those words are too common to search for; try more specific ones."
        values = {"user": user, "q": query, "terms": terms, "hits": hits, "error": error}
        return self._ctx.render(request, login, "search.html", values)
