"""The dashboard's door: login with an admin key, logout, and the check every route makes.

Deny by default: a route is reachable only through :meth:`Guard.page` (a live login)
or :meth:`Guard.action` (a live login plus its CSRF token and a same-origin request).
Without a login, a page answers with a redirect to the login form and an htmx partial
with 401, never with data. Failed logins spend the same per-address budget as the
admin API's failed authentications (:class:`FailedAuthLimit`). The key travels only in
the login form's POST body; it is never put in a URL, a cookie or a log.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

from picobot.admin.auth_limit import FailedAuthLimit
from picobot.dashboard.render import Renderer, html_response, see_other
from picobot.dashboard.session import Login, LoginStore, clear_cookie, cookie_token, set_cookie
from picobot.errors import UserError
from picobot.logsafe import loggable
from picobot.privacy.scopes import Actor

log = logging.getLogger(__name__)

CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
POLL_HEADER = "X-Dashboard-Poll"
"""Sent (value ``1``) by the listings' automatic refreshes: they keep no login alive."""
LOGIN_PATH = "/admin/login"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
LoginHandler = Callable[[web.Request, Login], Awaitable[web.StreamResponse]]


def is_htmx(request: web.Request) -> bool:
    """Whether htmx sent the request (it wants a fragment, not a page)."""
    return request.headers.get("HX-Request") == "true"


def is_poll(request: web.Request) -> bool:
    """Whether the page made the request by itself (a refresh), not the operator."""
    return request.headers.get(POLL_HEADER) == "1"


def same_origin(request: web.Request) -> bool:
    """False when the browser says the request comes from another site.

    Browsers send Origin on every cross-site POST; a request without one (an old
    client, a same-origin navigation) is judged by its CSRF token alone.
    """
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    return origin != "null" and urlsplit(origin).netloc == request.host


class Guard:
    """Logins, logouts and the wrappers that protect every other route."""

    def __init__(
        self,
        logins: LoginStore,
        renderer: Renderer,
        operator_of: Callable[[str | None], Actor | None],
        auth_limit: FailedAuthLimit,
        *,
        always_secure: bool,
    ) -> None:
        self._logins = logins
        self._renderer = renderer
        self._operator_of = operator_of
        self._auth_limit = auth_limit
        self._always_secure = always_secure

    def _secure(self, request: web.Request) -> bool:
        return self._always_secure or request.secure

    def _unauthenticated(self, request: web.Request) -> web.StreamResponse:
        if is_htmx(request):
            # htmx does not swap a 401; the page script sends the browser to the login.
            return html_response("<p>Please log in.</p>", 401, {"HX-Redirect": LOGIN_PATH})
        return see_other(LOGIN_PATH)

    def page(self, handler: LoginHandler) -> Handler:
        """A read route: it runs only for a live login. A poll (:func:`is_poll`) does not
        refresh the login's idle time; any other request does."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            login = self._logins.get(cookie_token(request), touch=not is_poll(request))
            if login is None:
                return self._unauthenticated(request)
            return await self._run(handler, request, login)

        return guarded

    async def _run(
        self, handler: LoginHandler, request: web.Request, login: Login
    ) -> web.StreamResponse:
        """Run ``handler``; a refusal it raises becomes an error page (nothing changed)."""
        try:
            return await handler(request, login)
        except web.HTTPClientError as exc:
            message = exc.text or exc.reason
            return self._error(login, message, exc.status)
        except UserError as exc:
            return self._error(login, str(exc), 400)

    def _error(self, login: Login, message: str, status: int) -> web.Response:
        return self._renderer.page(
            "error.html", {"login": login, "csrf": login.csrf, "message": message}, status=status
        )

    def action(self, handler: LoginHandler) -> Handler:
        """A state-changing route: a live login, same origin, and the login's CSRF token."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            login = self._logins.get(cookie_token(request))
            if login is None:
                return self._unauthenticated(request)
            presented = request.headers.get(CSRF_HEADER)
            if presented is None and request.content_type in (
                "application/x-www-form-urlencoded",
                "multipart/form-data",
            ):
                try:
                    field = (await request.post()).get(CSRF_FIELD)
                except web.HTTPRequestEntityTooLarge:
                    # aiohttp's bounds on a form's size and number of fields.
                    message = "The form was too large to read. Nothing was changed."
                    return self._error(login, message, 413)
                presented = field if isinstance(field, str) else None
            if not same_origin(request) or not login.csrf_ok(presented):
                log.warning(
                    "dashboard: refused %s %s by %s: missing or wrong CSRF token or origin",
                    loggable(request.method),
                    loggable(request.path),
                    login.actor.id,
                )
                return self._error(
                    login,
                    "The form was stale or not sent from this page; reload the page and try"
                    " again. Nothing was changed.",
                    403,
                )
            return await self._run(handler, request, login)

        return guarded

    # --- login and logout ---------------------------------------------------------------

    async def login_form(self, request: web.Request) -> web.StreamResponse:
        """``GET /admin/login``: the form (or the overview when already logged in)."""
        if self._logins.get(cookie_token(request)) is not None:
            return see_other("/admin/")
        return self._form(None, 200)

    def _form(
        self, error: str | None, status: int, headers: dict[str, str] | None = None
    ) -> web.Response:
        return self._renderer.page(
            "login.html", {"login": None, "error": error}, status=status, headers=headers
        )

    async def login(self, request: web.Request) -> web.StreamResponse:
        """``POST /admin/login`` with ``key``: a new login and its cookie, or the form again."""
        refusal = self._auth_limit.refusal(request)
        if refusal is not None:
            wait = refusal.headers.get("Retry-After", "60")
            return self._form(
                f"Too many failed attempts from this address; try again in {wait} s.",
                429,
                {"Retry-After": wait},
            )
        if not same_origin(request):
            return self._form("The login form must be sent from this page.", 403)
        form = await request.post()
        key = form.get("key")
        actor = self._operator_of(key.strip() if isinstance(key, str) else None)
        if actor is None:
            self._auth_limit.failed(request)
            return self._form("That is not an admin key.", 401)
        # A fresh token every login (no fixation); an old login of this browser ends.
        self._logins.end(cookie_token(request))
        token, _ = self._logins.create(actor)
        log.info("dashboard: %s logged in from %s", actor.id, loggable(request.remote or "?"))
        response = see_other("/admin/")
        set_cookie(response, token, secure=self._secure(request), max_age=self._logins.max_secs)
        return response

    async def logout(self, request: web.Request, login: Login) -> web.StreamResponse:
        """``POST /admin/logout``: the login ends on the server, the cookie is dropped."""
        self._logins.end(cookie_token(request))
        log.info("dashboard: %s logged out", login.actor.id)
        response = see_other(LOGIN_PATH)
        clear_cookie(response, secure=self._secure(request))
        return response
