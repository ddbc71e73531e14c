"""The admin HTTP API: operator access to sessions, memories, learned facts, search,
export and purges.

Mounted by ``picobot serve`` on the same aiohttp Application as the webhooks, and only
when operator keys are configured (``[server] admin_api_keys_env``): without keys there
is no admin route at all. Every ``/api/v1`` route and ``/metrics`` needs
``Authorization: Bearer <key>`` or ``X-API-Key: <key>``; ``/healthz`` (liveness) and
``/readyz`` (the store takes writes) are public and say nothing but which part is "ok"
or "unavailable". Failed authentications are limited per peer (429 with Retry-After;
:mod:`picobot.admin.auth_limit`). Chat keys (WebSocket) are a different set and never
open this API.

Each key acts as the operator ``api:<first 8 characters>``. ``/api/v1/events`` lists
what happened and ``/api/v1/events/stream`` follows it live (Server-Sent Events).
Purges use the same two-step exchange as the chat: ``POST /api/v1/purge`` returns the
exact counts and a confirmation token bound to that key;
``POST /api/v1/purge/{token}/confirm`` with ``{"answer": "y"}`` executes it.
Reference: ``docs/api.md`` and ``/api/v1/openapi.json``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from aiohttp import web
from prometheus_client.registry import Collector

from picobot.admin.auth_limit import FailedAuthLimit
from picobot.admin.headers import protect_responses
from picobot.admin.http import (
    ApiError,
    StreamAborted,
    error_response,
    json_response,
    read_query,
)
from picobot.admin.metrics import MetricsEndpoint
from picobot.admin.models import NoQuery
from picobot.admin.openapi import OPENAPI
from picobot.admin.readiness import ReadinessProbe
from picobot.admin.routes_data import DataRoutes
from picobot.admin.routes_events import EventRoutes
from picobot.admin.routes_facts import FactRoutes
from picobot.admin.routes_ops import OpsRoutes
from picobot.auth import KEY_PREFIX_LENGTH, KeyRing, key_prefix, parse_key_list, presented_key
from picobot.config.channels import ServerSettings
from picobot.config.sources import read_secret
from picobot.errors import ConfigError, StoreUnavailable, UserError
from picobot.logsafe import loggable
from picobot.metrics import METRICS, PicobotMetrics
from picobot.privacy.scopes import Actor
from picobot.runtime import Runtime

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ActorHandler = Callable[[web.Request, Actor], Awaitable[web.StreamResponse]]


def parse_admin_keys(raw: str, env_name: str) -> list[str]:
    """Comma-separated operator keys; ConfigError naming ``env_name`` (never a key)."""
    keys: list[str] = []
    for entry in parse_key_list(raw, env_name, what="admin API keys", labels=False):
        key = entry.key
        if not key.isascii() or not key.isprintable() or " " in key:
            raise ConfigError(
                f"{entry.where}: admin API keys must be printable ASCII without spaces"
            )
        # The actor id is the prefix; two keys sharing it would share pending purges.
        if any(key_prefix(k) == key_prefix(key) for k in keys):
            raise ConfigError(
                f"{entry.where}: two keys share their first {KEY_PREFIX_LENGTH} characters"
            )
        keys.append(key)
    return keys


def load_admin_keys(
    settings: ServerSettings, environ: Mapping[str, str] | None = None
) -> list[str]:
    """The operator keys from the env var named by ``admin_api_keys_env`` ([] if unset)."""
    name = settings.admin_api_keys_env
    return parse_admin_keys(read_secret(name, environ), name)


def operator_actor(key: str) -> Actor:
    """The operator a key acts as: ``api:<first 8 characters of the key>``."""
    return Actor(f"api:{key_prefix(key)}", operator=True)


class AdminAPI:
    """The admin routes over one runtime; mount with :meth:`add_routes`.

    ``/metrics`` serves ``metrics``, the queue depths, the runtime's jobs and the
    process metrics (:mod:`picobot.admin.metrics`), plus ``collectors``
    (prometheus_client collectors, such as the webhook counters). Every operation
    is the runtime's services' (:mod:`picobot.services`), pending purges included;
    ``clock`` is the time of the failed-login budget and of the readiness probe.
    """

    def __init__(
        self,
        runtime: Runtime,
        keys: Sequence[str],
        *,
        collectors: Sequence[Collector] = (),
        clock: Callable[[], float] | None = None,
        metrics: PicobotMetrics = METRICS,
    ) -> None:
        checked = parse_admin_keys(",".join(keys), "admin API keys")
        if not checked:
            # Deny by default: an admin API that nobody can open must not be mounted.
            raise ConfigError("the admin API needs at least one operator key")
        self._keys = KeyRing((k, operator_actor(k)) for k in checked)
        self._db = runtime.db
        self._clock = clock or runtime.kernel.clock
        settings = runtime.settings
        services = runtime.services
        self._metrics = MetricsEndpoint(
            runtime.db, runtime.tasks, metrics=metrics, collectors=collectors
        )
        self._data = DataRoutes(services)
        self._facts = FactRoutes(services.facts)
        self._ops = OpsRoutes(runtime.db, settings, runtime.tasks, services, self._clock)
        server = settings.server
        self.events = EventRoutes(
            services.events,
            max_streams=server.admin_event_streams,
            per_key=server.admin_event_streams_per_key,
            write_timeout_secs=server.admin_event_stream_write_timeout_secs,
        )
        self._auth_limit = FailedAuthLimit(
            server.admin_auth_max_failures, server.admin_auth_window_secs, clock=self._clock
        )
        self._readiness = ReadinessProbe(
            runtime.db, server.ready_min_free_mb * 1024 * 1024, clock=self._clock
        )

    def routes(self) -> list[web.RouteDef]:
        """Every admin route (HEAD is not added: the OpenAPI document lists all)."""
        d, o, f, p = self._data, self._ops, self._facts, self._protected
        return [
            web.get("/healthz", self.healthz, allow_head=False),
            web.get("/readyz", self._readiness.handle, allow_head=False),
            web.get("/metrics", p(self._metrics.handle), allow_head=False),
            web.get("/api/v1/openapi.json", p(self.openapi), allow_head=False),
            web.get("/api/v1/sessions", p(d.list_sessions), allow_head=False),
            web.get("/api/v1/sessions/{id}", p(d.get_session), allow_head=False),
            web.get("/api/v1/users/{user_id}/memories", p(d.list_memories), allow_head=False),
            web.post("/api/v1/users/{user_id}/memories", p(d.create_memory)),
            web.put("/api/v1/users/{user_id}/memories/{key}", p(d.update_memory)),
            web.delete("/api/v1/users/{user_id}/memories/{key}", p(d.delete_memory)),
            web.get("/api/v1/users/{user_id}/export", p(d.export), allow_head=False),
            web.get("/api/v1/search", p(d.search), allow_head=False),
            web.get("/api/v1/facts", p(f.list_facts), allow_head=False),
            web.post("/api/v1/facts", p(f.create_fact)),
            web.get("/api/v1/facts/{id}", p(f.get_fact), allow_head=False),
            web.patch("/api/v1/facts/{id}", p(f.update_fact)),
            web.delete("/api/v1/facts/{id}", p(f.delete_fact)),
            web.get("/api/v1/retention", p(o.retention), allow_head=False),
            web.post("/api/v1/purge", p(o.purge)),
            web.post("/api/v1/purge/{token}/confirm", p(o.confirm)),
            web.delete("/api/v1/messages/{id}", p(o.delete_message)),
            web.get("/api/v1/events", p(self.events.list_events), allow_head=False),
            web.get("/api/v1/events/stream", p(self.events.stream), allow_head=False),
        ]

    def add_routes(self, app: web.Application) -> None:
        """Mount the admin routes on ``app`` (shared with the webhook routes)."""
        app.add_routes(self.routes())
        # Every answer of the shared app, its 404 and 405 pages included.
        protect_responses(app)
        app.on_shutdown.append(self._shutdown)
        app.on_cleanup.append(self._cleanup)

    async def _shutdown(self, app: web.Application) -> None:
        # Before aiohttp waits for the handlers: open event streams end now.
        self.events.close()

    async def _cleanup(self, app: web.Application) -> None:
        self._auth_limit.close()

    def authenticate(self, request: web.Request) -> Actor | None:
        """The operator of the key the request presents, or None."""
        headers = request.headers
        return self.operator_of(
            presented_key(headers.get("Authorization"), headers.get("X-API-Key"))
        )

    def operator_of(self, key: str | None) -> Actor | None:
        """The operator ``key`` is (constant-time comparison), or None: the dashboard's login."""
        return self._keys.lookup(key)

    @property
    def auth_limit(self) -> FailedAuthLimit:
        """The per-address budget of failed authentications, shared with the dashboard's
        login so that a guesser gets one budget, not one per door."""
        return self._auth_limit

    def _protected(self, handler: ActorHandler) -> Handler:
        """Authenticate, run ``handler``, and turn failures into JSON errors."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            refusal = self._auth_limit.refusal(request)
            if refusal is not None:
                return refusal
            actor = self.authenticate(request)
            if actor is None:
                self._auth_limit.failed(request)
                return error_response(
                    401,
                    "unauthorized",
                    "Missing or invalid API key.",
                    {"WWW-Authenticate": 'Bearer realm="picobot-admin"'},
                )
            try:
                return await handler(request, actor)
            except ApiError as exc:
                return exc.response()
            except UserError as exc:
                # Validation rules shared with the chat commands; their text is safe.
                return error_response(400, "invalid", str(exc))
            except StoreUnavailable:
                log.exception(
                    "admin API: store unavailable for %s %s",
                    loggable(request.method),
                    loggable(request.path),
                )
                return error_response(503, "store_unavailable", "The database is unavailable.")
            except (StreamAborted, web.HTTPException):
                raise
            except Exception:
                log.exception(
                    "admin API: %s %s failed", loggable(request.method), loggable(request.path)
                )
                return error_response(500, "internal", "Internal error; see the server log.")

        return guarded

    # --- health, metrics, document ---------------------------------------------------------

    async def healthz(self, request: web.Request) -> web.StreamResponse:
        """``GET /healthz`` (public): 200 when the database answers, else 503."""
        try:
            await self._db.ping()
        except Exception:
            # No detail in a public answer; the log has it.
            log.warning("health check: the database does not answer", exc_info=True)
            return json_response({"status": "unavailable", "database": "unavailable"}, 503)
        return json_response({"status": "ok", "database": "ok"})

    async def openapi(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``GET /api/v1/openapi.json``: the OpenAPI 3.1 document of this API."""
        read_query(request, NoQuery)
        return json_response(OPENAPI)
