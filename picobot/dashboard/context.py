"""What every dashboard view uses: the services, the renderer, the operator's clock.

The services are the runtime's (:mod:`picobot.services`), the ones the CLI, the admin
API and the chat commands use, so a change made here follows the same rules and is
recorded the same way, with the logged-in operator as the actor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from picobot.config.learning import LearningState
from picobot.config.settings import Settings
from picobot.dashboard.guard import is_htmx
from picobot.dashboard.render import Renderer
from picobot.dashboard.session import Login
from picobot.services.bundle import Services
from picobot.store.db import Database
from picobot.tasks.supervisor import TaskSupervisor

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Context:
    """The dependencies of the views (one per mounted dashboard)."""

    db: Database
    settings: Settings
    tasks: TaskSupervisor
    renderer: Renderer
    services: Services
    clock: Callable[[], float]
    """Wall-clock time (seconds since the epoch) of every change."""
    learning: LearningState | None = None
    """Whether the bot learns by itself and with which model (the overview shows it)."""

    def render(
        self,
        request: web.Request,
        login: Login,
        name: str,
        values: Mapping[str, Any],
        *,
        status: int = 200,
    ) -> web.Response:
        """Template ``name`` for ``login``: it gets ``login``, ``csrf``, ``htmx`` and ``path``."""
        return self.renderer.page(
            name,
            {
                **values,
                "login": login,
                "csrf": login.csrf,
                "htmx": is_htmx(request),
                "path": request.path,
            },
            status=status,
        )


def form_text(form: Mapping[str, Any], name: str) -> str:
    """A form field as stripped text ("" when absent or a file)."""
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""
