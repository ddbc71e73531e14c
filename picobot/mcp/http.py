"""MCP over streamable HTTP, on a listener of its own inside ``picobot serve``.

The SDK's Starlette app (``MCPServer.streamable_http_app``) runs under uvicorn, the
way the SDK runs it itself, on a socket bound here first (so a taken port is a clear
error, and port 0 works). In front of it, :class:`KeyGate` refuses a request without a
valid API key (``Authorization: Bearer <key>`` or ``X-API-Key``, read by
:mod:`picobot.auth` as for the WebSocket channel) with 401 before the SDK sees it, and
hands the key's user id on in the ASGI scope: the only place the tools take it from. It
also sets the SDK's ``scope["user"]``, which binds each MCP session to the key's user
(another key presenting that session id gets 404).

uvicorn gets no say over signals or logging: ``serve`` owns SIGINT/SIGTERM and
PicoBot's logging is configured already.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import Iterator, Mapping
from typing import Any

import uvicorn
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context

from picobot.auth import KeyRing, presented_key
from picobot.config.channels import McpSettings, ServerSettings
from picobot.config.sections import host_port
from picobot.errors import ConfigError, PicobotError
from picobot.logsafe import LogSummary, loggable
from picobot.mcp.access import MemoryAccess
from picobot.mcp.server import build_server
from picobot.ratelimit import peer_key

log = logging.getLogger(__name__)

USER_KEY = "picobot.user_id"
"""Where :class:`KeyGate` leaves the authenticated user id in the ASGI scope."""

Scope = dict[str, Any]


def request_user(ctx: Context) -> str | None:
    """The user id :class:`KeyGate` authenticated for this request (None on stdio)."""
    request = ctx.request_context.request
    scope = getattr(request, "scope", None)
    user = scope.get(USER_KEY) if isinstance(scope, dict) else None
    return user if isinstance(user, str) else None


def _header(scope: Scope, name: bytes) -> str | None:
    values = [v for k, v in scope.get("headers", []) if k.lower() == name]
    # Sent twice is ambiguous: treated as absent, as picobot.auth.only does.
    return values[0].decode("latin-1") if len(values) == 1 else None


class KeyGate:
    """ASGI middleware: no valid API key, no MCP (401); the key alone names the user."""

    def __init__(self, app: Any, keys: Mapping[str, str]) -> None:
        self.app = app
        self._keys = KeyRing(keys.items())
        self._refusals = LogSummary(log, "MCP: refused requests", level=logging.INFO)

    def close(self) -> None:
        """Flush the refusal summary."""
        self._refusals.close()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # lifespan: the SDK's session manager
            return
        scope.pop(USER_KEY, None)
        key = presented_key(_header(scope, b"authorization"), _header(scope, b"x-api-key"))
        user_id = self._keys.lookup(key)
        if user_id is None:
            peer = (scope.get("client") or ("?", 0))[0]
            self._refusals.note(
                peer_key(str(peer)),
                "MCP refused %s: missing or invalid API key",
                loggable(str(peer)),
            )
            await _refuse(send)
            return
        scope[USER_KEY] = user_id
        # The key is not kept: the SDK only compares the principal (client_id).
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=user_id, scopes=[]))
        await self.app(scope, receive, send)


async def _refuse(send: Any) -> None:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32001, "message": "Missing or invalid API key."},
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="picobot"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: ``serve`` owns SIGINT and SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        address = host_port(host, port)
        raise PicobotError(f"MCP cannot listen on {address}: {exc.strerror or exc}") from None


class McpHttp:
    """The MCP listener: ``start`` binds and serves, ``stop`` drains and closes."""

    def __init__(
        self,
        access: MemoryAccess,
        settings: McpSettings,
        server_settings: ServerSettings,
        keys: Mapping[str, str],
        *,
        grace_secs: float = 10.0,
    ) -> None:
        if not keys:
            env = settings.api_keys_env
            raise ConfigError(f"{env} holds no API keys; every MCP client would be refused")
        self.settings = settings
        mcp = build_server(access, request_user)
        app = mcp.streamable_http_app(
            streamable_http_path=settings.path,
            json_response=True,
            max_sessions=settings.max_sessions,
            host=settings.host,
        )
        self._gate = KeyGate(app, keys)
        self._config = uvicorn.Config(
            self._gate,
            log_config=None,  # PicoBot's logging stays as configured
            access_log=False,
            server_header=False,
            lifespan="on",
            limit_concurrency=server_settings.max_connections,
            timeout_keep_alive=int(server_settings.keepalive_timeout_secs) or 1,
            timeout_graceful_shutdown=int(grace_secs) or 1,
        )
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._port: int | None = None

    @property
    def url(self) -> str:
        """The endpoint clients use; only after :meth:`start`."""
        if self._port is None:
            raise RuntimeError("the MCP listener is not started")
        return f"http://{host_port(self.settings.host, self._port)}{self.settings.path}"

    async def start(self) -> None:
        """Bind, then serve in a task; a client connecting at once waits in the backlog."""
        sock = _bind(self.settings.host, self.settings.port)
        self._port = int(sock.getsockname()[1])
        self._server = _Server(self._config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="mcp-http")
        log.info("MCP listening on %s", self.url)

    async def stop(self) -> None:
        """Stop accepting, let requests in flight finish (up to the grace), close."""
        server, task = self._server, self._task
        self._server = self._task = None
        if server is None or task is None:
            return
        server.should_exit = True
        try:
            await task
        except SystemExit:  # uvicorn's answer to a failed start-up; logged by it
            log.error("the MCP listener stopped with an error")
        self._gate.close()
        log.info("MCP listener stopped")
