"""The operator dashboard at ``/admin/``: mounted by ``picobot serve`` beside the admin API.

It exists only where the admin API does (same keys, same failed-login budget) and
``[server] enable_dashboard`` is on. Pages are rendered on the server; htmx (vendored
in ``static/``, no CDN) refreshes parts of them. See docs/dashboard.md.
"""

from __future__ import annotations

import time
from pathlib import Path

from aiohttp import web

from picobot.admin.api import AdminAPI
from picobot.dashboard.context import Context
from picobot.dashboard.guard import Guard
from picobot.dashboard.render import Renderer, see_other
from picobot.dashboard.session import LoginStore
from picobot.dashboard.views_facts import FactViews
from picobot.dashboard.views_ops import OpsViews
from picobot.dashboard.views_sessions import SessionViews
from picobot.runtime import Runtime

STATIC = Path(__file__).parent / "static"


class Dashboard:
    """The dashboard's routes over one runtime; mount with :meth:`add_routes`."""

    def __init__(self, runtime: Runtime, admin: AdminAPI) -> None:
        settings = runtime.settings
        server = settings.server
        clock = runtime.kernel.clock
        renderer = Renderer()
        self._ctx = Context(
            db=runtime.db,
            settings=settings,
            tasks=runtime.tasks,
            renderer=renderer,
            services=runtime.services,
            clock=clock,
            learning=runtime.learning_state,
        )
        self.logins = LoginStore(
            idle_secs=server.dashboard_session_idle_secs,
            max_secs=server.dashboard_session_max_secs,
            clock=time.monotonic,
            per_operator=server.dashboard_sessions_per_key,
        )
        self._guard = Guard(
            self.logins,
            renderer,
            admin.operator_of,
            admin.auth_limit,
            always_secure=server.dashboard_secure_cookie,
        )

    def routes(self) -> list[web.RouteDef | web.StaticDef]:
        """Every dashboard route; all but the login form and static files need a login."""
        g = self._guard
        return [
            web.get("/admin", self._to_root, allow_head=False),
            web.get("/admin/login", g.login_form, allow_head=False),
            web.post("/admin/login", g.login),
            web.post("/admin/logout", g.action(g.logout)),
            web.static("/admin/static", STATIC),
            *OpsViews(self._ctx).routes(g),
            *FactViews(self._ctx).routes(g),
            *SessionViews(self._ctx).routes(g),
        ]

    async def _to_root(self, request: web.Request) -> web.StreamResponse:
        return see_other("/admin/")

    def add_routes(self, app: web.Application) -> None:
        """Mount the dashboard on ``app`` (shared with the admin API and webhooks)."""
        app.add_routes(self.routes())
