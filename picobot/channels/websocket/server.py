"""The WebSocket chat channel: clients with an API key chat with the kernel over JSON frames.

The key is checked in the opening handshake (``Authorization: Bearer <key>`` or
``X-API-Key: <key>``); a missing or wrong key gets HTTP 401 before any upgrade, so an
unauthenticated client never holds a WebSocket. The key alone decides the identity:
``user_id`` is ``ws:<key prefix>`` or ``ws:<identity>`` and ``chat_id`` equals it, so a
reconnecting client (or a second connection with the same key) continues the same
current session. The wire format lives in :mod:`picobot.channels.websocket.protocol`.

Each connection is served by :class:`picobot.channels.websocket.connection.Connection`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from types import TracebackType

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.frames import CloseCode
from websockets.http11 import Request, Response

from picobot.auth import MIN_KEY_LENGTH, KeyRing, only, presented_key
from picobot.channels.gate import ConnectionGate, ConnectionLimits, gated_connection_class
from picobot.channels.websocket.connection import CLOSE_TIMEOUT_SECS, RATE_BURST, Connection
from picobot.channels.websocket.protocol import parse_api_keys
from picobot.commands.export import EXPORT_PATH
from picobot.config.channels import WebSocketSettings
from picobot.config.sections import host_port
from picobot.config.sources import read_secret
from picobot.errors import ConfigError, PicobotError
from picobot.kernel.kernel import Kernel
from picobot.logsafe import LogSummary, loggable
from picobot.messages import Identity
from picobot.ratelimit import TokenBucket, peer_key
from picobot.services.export import ExportService

log = logging.getLogger(__name__)
# The websockets library logs handshake headers (API keys) and frames (chat content) at
# DEBUG; its connections log through this logger, which never goes below INFO.
wire_log = logging.getLogger(f"{__name__}.wire")
wire_log.setLevel(logging.INFO)


def hard_frame_limit(max_message_bytes: int) -> int:
    """The websockets ``max_size``: frames above it close the connection with 1009.

    It is twice the configured message limit, so that a message somewhat over the limit
    gets a clean ``too_large`` error event on a connection that stays usable, while a
    huge frame is still never buffered whole.
    """
    return 2 * max_message_bytes


class WebSocketChannel:
    """Serve the kernel to WebSocket clients; ``start``/``stop`` or ``async with``."""

    def __init__(
        self,
        kernel: Kernel,
        settings: WebSocketSettings,
        *,
        keys: Mapping[str, str] | None = None,
        grace_secs: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        export: ExportService | None = None,
    ) -> None:
        """``keys`` maps API key -> user id; by default read from ``settings.api_keys_env``.
        With ``export``, ``GET /export/<token>`` serves the downloads ``/export`` offers.

        Raises ConfigError (naming the env var, never a key) for a short or malformed key,
        or when there is no key at all: a channel that refuses everyone is a mistake.
        """
        env = settings.api_keys_env
        if keys is None:
            keys = parse_api_keys(read_secret(env), env)
        elif any(len(k) < MIN_KEY_LENGTH for k in keys):
            raise ConfigError(f"WebSocket API keys must be at least {MIN_KEY_LENGTH} characters")
        if not keys:
            raise ConfigError(f"{env} holds no WebSocket API keys; every client would be refused")
        self.kernel = kernel
        self.settings = settings
        self.export = export
        self.clock = clock
        self._grace_secs = grace_secs
        self._keys = KeyRing(keys.items())
        self._server: Server | None = None
        self._gate: ConnectionGate | None = None
        # One line per peer and minute: a key-guessing client must not grow the log.
        self._refusals = LogSummary(log, "WebSocket: refused handshakes", level=logging.INFO)
        self._port: int | None = None
        self._connections: set[Connection] = set()
        # One rate limit per identity (at most one per key), shared by its connections:
        # a client that reconnects, or opens several, gets no fresh burst.
        self._buckets: dict[str, TokenBucket] = {}
        self._names = itertools.count(1)
        self.stopping = False

    @property
    def port(self) -> int:
        """The bound port (useful with port 0); only after :meth:`start`."""
        if self._port is None:
            raise RuntimeError("the WebSocket channel is not started")
        return self._port

    @property
    def url(self) -> str:
        """The endpoint clients connect to."""
        return f"ws://{host_port(self.settings.host, self.port)}{self.settings.path}"

    async def start(self) -> None:
        """Bind and start accepting connections."""
        if self._server is not None:
            raise RuntimeError("the WebSocket channel is already started")
        s = self.settings
        self._gate = ConnectionGate(
            ConnectionLimits(s.max_connections, s.max_connections_per_peer), "WebSocket"
        )
        try:
            self._server = await serve(
                self._handle,
                s.host,
                s.port,
                process_request=self._process_request,
                ping_interval=s.ping_interval_secs,
                ping_timeout=s.ping_timeout_secs,
                close_timeout=CLOSE_TIMEOUT_SECS,
                max_size=hard_frame_limit(s.max_message_bytes),
                server_header="PicoBot",
                # Chat frames are small; permessage-deflate costs CPU for little gain
                # (about 3% of the event loop under 100 clients).
                compression=None,
                logger=wire_log,
                open_timeout=s.handshake_timeout_secs,
                create_connection=gated_connection_class(self._gate),
            )
        except OSError as exc:
            address = host_port(s.host, s.port)
            raise PicobotError(
                f"WebSocket channel cannot listen on {address}: {exc.strerror or exc}"
            ) from exc
        self._port = int(self._server.sockets[0].getsockname()[1])
        log.info("WebSocket channel listening on %s", self.url)

    async def stop(self, grace_secs: float) -> None:
        """Stop accepting, let in-flight turns finish up to ``grace_secs``, close with 1001.

        Messages queued but not started are answered with a ``shutting_down`` error; a
        turn still running after the grace period is cancelled and answered so too
        (its user message is stored if its ``session`` event was sent).
        """
        server, self._server = self._server, None
        if server is None:
            return
        self.stopping = True
        server.server.close()  # no new TCP connections; handshakes under way get 503
        connections = list(self._connections)
        for conn in connections:
            conn.close_inbox(refuse=True)
        settling = [asyncio.create_task(conn.settle()) for conn in connections]
        if settling:
            _, pending = await asyncio.wait(settling, timeout=grace_secs)
            if pending:
                log.warning("WebSocket: %d turns outlived the grace period", len(pending))
                for conn in connections:
                    conn.cancel_turn()
                # Their shutting_down answers get as long as a close handshake to go out.
                _, pending = await asyncio.wait(settling, timeout=CLOSE_TIMEOUT_SECS)
                for conn in connections:
                    conn.cancel_work()
                for task in pending:
                    task.cancel()
                await asyncio.wait(settling)
        server.close(code=CloseCode.GOING_AWAY, reason="server shutting down")
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_SECS * 2):
                await server.wait_closed()
        except TimeoutError:
            # Clients that stopped reading cannot complete the close handshake.
            for ws in list(server.all_connections):
                ws.transport.abort()
            await server.wait_closed()
        if self._gate is not None:
            self._gate.close()
        self._refusals.close()
        log.info("WebSocket channel stopped")

    async def __aenter__(self) -> WebSocketChannel:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop(self._grace_secs)

    # --- handshake ----------------------------------------------------------------------

    def authenticate(self, headers: Headers) -> str | None:
        """The user id of the key presented in ``headers``, or None."""
        authorization, api_key = headers.get_all("Authorization"), headers.get_all("X-API-Key")
        return self._keys.lookup(presented_key(only(authorization), only(api_key)))

    def _bucket(self, user_id: str) -> TokenBucket:
        bucket = self._buckets.get(user_id)
        if bucket is None:
            bucket = TokenBucket(self.settings.rate_limit_per_minute, RATE_BURST, self.clock)
            self._buckets[user_id] = bucket
        return bucket

    async def _process_request(self, ws: ServerConnection, request: Request) -> Response | None:
        # The request target as sent, less its query: urlsplit would read "//host/ws" as
        # the endpoint, and raise on "//[" (a 500 with a traceback, for anyone).
        target = request.path.partition("?")[0]
        if target.startswith(EXPORT_PATH) and self.export is not None:
            return await self._download(ws, target[len(EXPORT_PATH) :])
        if target != self.settings.path:
            return ws.respond(HTTPStatus.NOT_FOUND, "Not found.\n")
        if self.authenticate(request.headers) is None:
            self._refusals.note(
                _peer_key(ws),
                "WebSocket refused %s (%s): missing or invalid API key",
                _peer(ws),
                loggable(request.headers.get("User-Agent", "no user agent")),
            )
            response = ws.respond(HTTPStatus.UNAUTHORIZED, "Missing or invalid API key.\n")
            response.headers["WWW-Authenticate"] = 'Bearer realm="picobot"'
            return response
        return None

    async def _download(self, ws: ServerConnection, token: str) -> Response:
        """``GET /export/<token>``: the export of the token's user, once (no API key:
        the single-use token, shown only to that user, is the credential)."""
        assert self.export is not None
        user_id = self.export.tokens.redeem(token)
        if user_id is None:
            return ws.respond(HTTPStatus.NOT_FOUND, "Unknown, used or expired export link.\n")
        log.info("WebSocket: export downloaded by %s", loggable(user_id))
        body = "".join([line async for line in self.export.jsonl(user_id)])
        response = ws.respond(HTTPStatus.OK, body)
        del response.headers["Content-Type"]  # a multi-dict: replace, not add
        response.headers["Content-Type"] = "application/x-ndjson; charset=utf-8"
        response.headers["Content-Disposition"] = 'attachment; filename="picobot-export.jsonl"'
        response.headers["Cache-Control"] = "no-store"
        return response

    async def _handle(self, ws: ServerConnection) -> None:
        # Authenticated again from the same headers: the handshake already vetted them,
        # and recomputing keeps no per-handshake state around for failed upgrades.
        user_id = self.authenticate(ws.request.headers) if ws.request is not None else None
        if user_id is None:  # pragma: no cover - refused in _process_request
            await ws.close(CloseCode.POLICY_VIOLATION)
            return
        conn = Connection(
            ws,
            Identity("ws", user_id, user_id),
            f"c{next(self._names)}",
            kernel=self.kernel,
            settings=self.settings,
            bucket=self._bucket(user_id),
            accepting=not self.stopping,
        )
        self._connections.add(conn)
        log.info("WebSocket %s opened for %s from %s", conn.name, user_id, _peer(ws))
        try:
            await conn.run()
        finally:
            self._connections.discard(conn)
            log.info("WebSocket %s closed for %s (code %s)", conn.name, user_id, ws.close_code)


def _peer_key(ws: ServerConnection) -> str:
    try:
        return peer_key(str(ws.remote_address[0]))
    except (TypeError, IndexError, OSError):
        return "?"


def _peer(ws: ServerConnection) -> str:
    """The peer as a log line may show it."""
    try:
        host, port = ws.remote_address[:2]
    except (TypeError, ValueError, OSError):
        return "?"
    return loggable(f"{host}:{port}")
