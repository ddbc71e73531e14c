"""``picobot serve``: every enabled channel and the background tasks in one process.

Binds 127.0.0.1 by default. On SIGINT/SIGTERM every channel stops accepting at once and
the turns in flight, of all channels together, get ``[server] shutdown_grace_secs`` to
finish (a turn cut off later is answered: a WebSocket client gets a ``shutting_down``
error, and a webhook message is processed again on the next start); then it cancels
and awaits the background tasks, and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import signal
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from picobot.channels.gate import (
    ConnectionLimits,
    accept_errors_summarized,
    descriptor_shortfall,
)
from picobot.channels.http_guard import HttpGuard, HttpLimits
from picobot.config.channels import ServerSettings
from picobot.config.sections import host_port
from picobot.config.settings import Settings
from picobot.errors import PicobotError
from picobot.llm.base import LLMProvider
from picobot.registry import Registry
from picobot.runtime import Runtime, open_runtime

if TYPE_CHECKING:
    from picobot.channels.webhook.base import Platform
    from picobot.channels.webhook.connections.base import OutboundConnections
    from picobot.channels.webhook.server import WebhookServer

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ServeInfo:
    """Where the server listens, for logs, tests and the start-up banner."""

    http_url: str | None = None
    websocket_url: str | None = None
    openai_url: str | None = None
    webhooks: list[str] = field(default_factory=list)
    connections: list[str] = field(default_factory=list)
    admin_api: bool = False
    dashboard: bool = False
    mcp_url: str | None = None

    def lines(self) -> list[str]:
        """Human-readable start-up lines."""
        out = [f"outbound connection: {name}" for name in self.connections]
        if self.websocket_url:
            out.append(f"WebSocket chat: {self.websocket_url}")
        if self.mcp_url:
            out.append(f"MCP (streamable HTTP): {self.mcp_url}")
        if self.openai_url:
            out.append(f"OpenAI-compatible chat: {self.openai_url}")
        if self.http_url:
            for name in self.webhooks:
                out.append(f"webhook {name}: {self.http_url}/webhooks/{name}")
            if self.admin_api:
                url = self.http_url
                out.append(f"admin API: {url}/api/v1 (probes: {url}/healthz, {url}/readyz)")
            if self.dashboard:
                out.append(f"operator dashboard: {self.http_url}/admin/")
        return out or ["no channel is enabled; see docs/channels.md"]


Stop = Callable[[], Awaitable[None]]
"""Stops one channel: it stops accepting at once, then lets its turns finish."""

ChannelStarter = Callable[[Runtime, list[Stop], ServeInfo], Awaitable[None]]
"""Starts one channel if its settings enable it: appends its Stop, fills in ServeInfo."""

CHANNELS: Registry[ChannelStarter] = Registry("channel")
"""What ``serve`` starts, in order; adding a channel is its module plus one starter here."""


async def _stop_together(stops: list[Stop]) -> None:
    """Stop every channel at the same time.

    One after another, a channel kept accepting new clients while an earlier one
    drained, and each took a grace period of its own.
    """
    results = await asyncio.gather(*(stop() for stop in stops), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def _start_http(rt: Runtime, stops: list[Stop], info: ServeInfo) -> None:
    """Webhooks and the admin API share one aiohttp app on [server] host:port; outbound
    connections (Telegram polling, Slack Socket Mode) feed the same webhook core."""
    from picobot.admin.api import AdminAPI, load_admin_keys
    from picobot.admin.headers import protect_responses
    from picobot.admin.metrics import webhook_metrics_middleware
    from picobot.channels.webhook.connections.metrics import ConnectionMetrics
    from picobot.channels.webhook.metrics import WebhookMetrics
    from picobot.channels.webhook.registry import enabled_platforms

    settings = rt.settings
    hooks = settings.channels.webhook
    platforms = enabled_platforms(hooks)
    keys = load_admin_keys(settings.server) if settings.server.enable_admin_api else []
    if not platforms and not keys:
        log.info("no webhook platform and %s: the HTTP server is not started", _admin_off(settings))
        return
    core = _webhook_core(rt, platforms, info)
    if not info.webhooks and not keys:
        # Only outbound connections: nothing to listen for.
        log.info("no webhook route and %s: the HTTP server is not started", _admin_off(settings))
        if core is not None:
            stops.append(functools.partial(core.stop, settings.server.shutdown_grace_secs))
            await core.start()
        return
    guard = HttpGuard(http_limits(settings.server))
    app = web.Application(
        client_max_size=hooks.max_body_bytes,
        # The guard's first: its deadlines must know when a request head is complete.
        middlewares=[guard.middleware, webhook_metrics_middleware()],
    )
    protect_responses(app)  # nosniff, no framing, no aiohttp version: on every answer
    if core is not None:
        core.webhooks.add_routes(app)
    if keys:
        collectors: list[Any] = []
        if core is not None:
            collectors += [
                WebhookMetrics(core.webhooks.stats),
                ConnectionMetrics(core.connections.statuses),
            ]
        admin = AdminAPI(rt, keys, collectors=collectors)
        admin.add_routes(app)
        info.admin_api = True
        if settings.server.enable_dashboard:
            from picobot.dashboard.app import Dashboard

            Dashboard(rt, admin).add_routes(app)
            info.dashboard = True
    else:
        log.warning("%s", _admin_off(settings))
    runner = web.AppRunner(
        app, access_log=None, keepalive_timeout=settings.server.keepalive_timeout_secs
    )
    await runner.setup()

    async def stop() -> None:
        # Stop accepting HTTP first, then fetch nothing more and drain the webhooks.
        guard.close()
        await runner.cleanup()
        if core is not None:
            await core.stop(settings.server.shutdown_grace_secs)

    stops.append(stop)
    try:
        await guard.listen(runner, settings.server.host, settings.server.port)
    except OSError as exc:
        # As the WebSocket channel does: the file may be fine, the port is taken.
        address = host_port(settings.server.host, settings.server.port)
        raise PicobotError(f"cannot listen on {address}: {exc.strerror}") from None
    port = guard.port
    info.http_url = f"http://{host_port(settings.server.host, port)}"
    if core is not None:
        await core.start()


@dataclass(slots=True)
class _WebhookCore:
    """The webhook server (inbox, reply queue, routes) and the outbound connections."""

    webhooks: WebhookServer
    connections: OutboundConnections

    async def start(self) -> None:
        """Start the workers, then the connections."""
        await self.webhooks.start()
        self.connections.start()

    async def stop(self, grace_secs: float) -> None:
        """Fetch nothing more, then let the turns in flight finish for ``grace_secs``."""
        await self.connections.stop()
        await self.webhooks.close(grace_secs)


def _webhook_core(rt: Runtime, platforms: list[Platform], info: ServeInfo) -> _WebhookCore | None:
    """The webhook core for the enabled platforms (None without any); fills in ``info``."""
    from picobot.channels.webhook.connections.base import OutboundConnections
    from picobot.channels.webhook.connections.registry import outbound_connections, routed
    from picobot.channels.webhook.server import WebhookServer
    from picobot.store.channels.channel_state import ChannelState
    from picobot.store.channels.webhooks import WebhookStore

    if not platforms:
        return None
    settings = rt.settings
    webhooks = WebhookServer(
        rt.kernel,
        platforms,
        settings.channels.webhook,
        store=WebhookStore(rt.db),
        max_attempts=settings.server.outbound_max_attempts,
        supervisor=rt.tasks,
        routed=routed(platforms),
    )
    connections = OutboundConnections(
        outbound_connections(platforms, webhooks, ChannelState(rt.db)), rt.tasks
    )
    info.webhooks = routed(platforms)
    info.connections = [f"{s.channel} ({s.mode})" for s in connections.statuses]
    return _WebhookCore(webhooks, connections)


def http_limits(server: ServerSettings) -> HttpLimits:
    """The caps and deadlines of the HTTP server, from ``[server]``."""
    return HttpLimits(
        ConnectionLimits(server.max_connections, server.max_connections_per_peer),
        header_timeout=server.header_timeout_secs,
        body_timeout=server.body_timeout_secs,
        keepalive_timeout=server.keepalive_timeout_secs,
    )


def _check_descriptors(settings: Settings, info: ServeInfo) -> None:
    """Warn when the caps of the servers started do not fit the open-file limit: past
    it, accepting fails for everyone, health checks included, which the caps prevent."""
    total = 0
    if info.http_url is not None:
        total += settings.server.max_connections
    if info.websocket_url is not None:
        total += settings.channels.websocket.max_connections
    if info.openai_url is not None:  # its own listener, with [server]'s caps
        total += settings.server.max_connections
    problem = descriptor_shortfall(total)
    if problem is not None:
        log.warning("%s", problem)


def _admin_off(settings: Settings) -> str:
    """Why the admin API is not mounted: switched off, or no operator keys."""
    if not settings.server.enable_admin_api:
        # Keys may well be set; saying there are none would send the operator hunting.
        return "the admin API is disabled ([server] enable_admin_api = false)"
    return f"the admin API is off: no keys in ${settings.server.admin_api_keys_env}"


async def _start_websocket(rt: Runtime, stops: list[Stop], info: ServeInfo) -> None:
    from picobot.channels.websocket.server import WebSocketChannel

    settings = rt.settings
    if not settings.channels.websocket.enabled:
        return
    channel = WebSocketChannel(
        rt.kernel,
        settings.channels.websocket,
        grace_secs=settings.server.shutdown_grace_secs,
        export=rt.services.export,
    )
    await channel.start()
    stops.append(functools.partial(channel.stop, settings.server.shutdown_grace_secs))
    info.websocket_url = channel.url


async def _start_mcp(rt: Runtime, stops: list[Stop], info: ServeInfo) -> None:
    """The memory for remote MCP clients, on its own listener ([channels.mcp])."""
    settings = rt.settings
    if not settings.channels.mcp.enabled:
        return
    from picobot.mcp import require_sdk

    require_sdk()  # the mcp extra: imported only when enabled, so serve runs without it
    from picobot.channels.websocket.protocol import parse_api_keys
    from picobot.config.sources import read_secret
    from picobot.mcp.access import MemoryAccess
    from picobot.mcp.http import McpHttp

    mcp = settings.channels.mcp
    keys = parse_api_keys(read_secret(mcp.api_keys_env), mcp.api_keys_env)
    listener = McpHttp(
        MemoryAccess(settings, rt.db, services=rt.services),
        mcp,
        settings.server,
        keys,
        grace_secs=settings.server.shutdown_grace_secs,
    )
    await listener.start()
    stops.append(listener.stop)
    info.mcp_url = listener.url


async def _start_openai(rt: Runtime, stops: list[Stop], info: ServeInfo) -> None:
    from picobot.admin.headers import protect_responses
    from picobot.channels.openai_api.server import OpenAIChannel

    settings = rt.settings
    if not settings.channels.openai.enabled:
        return
    channel = OpenAIChannel(
        rt.kernel,
        settings.channels.openai,
        http_limits(settings.server),
        keys_env=settings.channels.websocket.api_keys_env,
        protect=protect_responses,
    )
    await channel.start()
    stops.append(functools.partial(channel.stop, settings.server.shutdown_grace_secs))
    info.openai_url = channel.url


# The channels serve starts, in this order (the HTTP one hosts the webhooks and admin).
CHANNELS.add("websocket", _start_websocket)
CHANNELS.add("http", _start_http)
CHANNELS.add("mcp", _start_mcp)
CHANNELS.add("openai", _start_openai)


async def serve(
    settings: Settings,
    *,
    provider: LLMProvider | None = None,
    stop: asyncio.Event | None = None,
    ready: Callable[[ServeInfo], None] | None = None,
) -> int:
    """Run until ``stop`` is set (or SIGINT/SIGTERM arrives); return the exit status."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    handled = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Not available off the main thread (tests run serve() in-process).
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
    try:
        with accept_errors_summarized(loop):
            return await _serve(settings, provider, stop, ready)
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)


@contextlib.contextmanager
def startup_objects_frozen() -> Iterator[None]:
    """Leave what exists at start-up out of the garbage collector's full passes.

    Modules, classes, settings and the runtime are made before the first message and
    live until the end, yet every full (generation 2) collection would walk them all,
    holding the GIL for tens of milliseconds under load. Frozen, they are skipped; what
    serving creates is still collected as before. Unfrozen on the way out, so an
    in-process caller (tests) gets them back.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def _serve(
    settings: Settings,
    provider: LLMProvider | None,
    stop: asyncio.Event,
    ready: Callable[[ServeInfo], None] | None,
) -> int:
    info = ServeInfo()
    async with (
        open_runtime(settings, provider=provider, warm_up=True) as rt,
        AsyncExitStack() as stack,
    ):
        stops: list[Stop] = []
        stack.push_async_callback(_stop_together, stops)
        for _, start in CHANNELS.items():
            await start(rt, stops, info)
        _check_descriptors(settings, info)
        for line in info.lines():
            log.info("%s", line)
        with startup_objects_frozen():
            if ready is not None:
                ready(info)
            await stop.wait()
        log.info("shutting down: finishing in-flight turns")
    log.info("stopped")
    return 0
