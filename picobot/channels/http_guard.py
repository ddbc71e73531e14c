"""Deadlines and caps for the aiohttp server of the webhooks and the admin API.

aiohttp has no time limit for reading a request's head or body, so a client sending a
header line every few seconds holds a connection (and a descriptor) for as long as it
likes. :class:`HttpGuard` wraps aiohttp's public protocol factory (``runner.server``)
and listens with ``loop.create_server`` itself; every connection:

- is counted by a :class:`~picobot.channels.gate.ConnectionGate` (per process and per
  peer; one over a cap gets 503 and is closed before anything is read);
- must deliver a request head within ``header_timeout`` of connecting or of its first
  byte after the previous response (else ``408`` and closed);
- must deliver the body within ``body_timeout`` of its head (else closed; the
  handler's read fails);
- may sit idle between requests for ``keepalive_timeout`` (then closed); a response
  still being sent counts as idle only while the client reads nothing of it.

The head is known to be complete when aiohttp hands the request to the application,
which :meth:`HttpGuard.middleware` (the outermost middleware) reports. Only public
aiohttp API is used: ``runner.server``, a middleware, ``request.transport``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

from aiohttp import web
from aiohttp.typedefs import Middleware

from picobot.channels.gate import ConnectionGate, ConnectionLimits
from picobot.logsafe import LogSummary, loggable

log = logging.getLogger(__name__)

TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"Content-Type: text/plain\r\n"
    b"Content-Length: 16\r\n"
    b"Connection: close\r\n"
    b"\r\n"
    b"Request timeout\n"
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """Caps and deadlines of the HTTP server (``[server]``)."""

    connections: ConnectionLimits
    header_timeout: float
    body_timeout: float
    keepalive_timeout: float


class _State(enum.Enum):
    HEAD = "head"  # waiting for (the rest of) a request head
    BODY = "body"  # the application runs; the body is still arriving
    BUSY = "busy"  # the application runs; the body is all there
    IDLE = "idle"  # between requests


class _GuardedProtocol(asyncio.Protocol):
    """aiohttp's protocol for one connection, behind the gate and the deadlines."""

    def __init__(self, guard: HttpGuard, inner: asyncio.Protocol) -> None:
        self._guard = guard
        self._inner = inner
        self._transport: asyncio.Transport | None = None
        self._peer: str | None = None
        self._state = _State.HEAD
        self._timer: asyncio.TimerHandle | None = None
        self._request: web.BaseRequest | None = None
        self._unsent = math.inf  # bytes of the last response not yet sent, at the last check

    # asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._peer = self._guard.gate.admit(transport)
        if self._peer is None:
            return
        # A listening TCP server's transports are full (read/write) transports.
        self._transport = cast(asyncio.Transport, transport)
        self._guard.track(self._transport, self)
        self._arm(self._guard.limits.header_timeout)
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._peer is None:
            return
        if self._state is _State.IDLE and data:
            self._state = _State.HEAD
            self._arm(self._guard.limits.header_timeout)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self._peer is None else self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._peer is None:
            return
        self._disarm()
        if self._transport is not None:
            self._guard.untrack(self._transport)
        self._guard.gate.release(self._peer)
        self._peer = None
        self._request = None
        self._inner.connection_lost(exc)

    # request life cycle (from the middleware) -------------------------------------

    def request_started(self, request: web.BaseRequest) -> None:
        if request.content.is_eof():
            self._state = _State.BUSY
            self._disarm()  # a handler may take long (an export); that is not the client
        else:
            self._state, self._request = _State.BODY, request
            self._arm(self._guard.limits.body_timeout)

    def request_finished(self) -> None:
        self._state, self._request = _State.IDLE, None
        self._unsent = math.inf
        self._arm(self._guard.limits.keepalive_timeout)

    # deadlines --------------------------------------------------------------------

    def _arm(self, delay: float) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(delay, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        state = self._state
        if state is _State.HEAD:
            self._guard.timed_out(self._peer or "?", "head")
            transport.write(TIMED_OUT)
            transport.close()
        elif state is _State.BODY:
            if self._request is not None and self._request.content.is_eof():
                self._state = _State.BUSY  # the body came in time; the handler runs on
                return
            # Mid-request: drop at once; the handler's read fails with a lost connection.
            self._guard.timed_out(self._peer or "?", "body")
            transport.abort()
        elif state is _State.IDLE:
            pending = transport.get_write_buffer_size()
            if not pending:
                transport.close()  # plain keep-alive expiry: nothing to report
            elif pending < self._unsent:
                # The last response is still going out, and moving: not idle yet.
                self._unsent = pending
                self._arm(self._guard.limits.keepalive_timeout)
            else:
                # A client that stopped reading its response holds the connection.
                self._guard.timed_out(self._peer or "?", "response")
                transport.abort()


class HttpGuard:
    """Caps and deadlines around one aiohttp server; see the module docstring.

    Use: add :attr:`middleware` first to the Application, then after ``runner.setup()``
    :meth:`listen` on ``host:port``; :meth:`close` stops accepting (before
    ``runner.cleanup()``).
    """

    def __init__(self, limits: HttpLimits, name: str = "HTTP server") -> None:
        self.limits = limits
        self.gate = ConnectionGate(limits.connections, name)
        self.timeouts = 0
        self._by_transport: dict[asyncio.BaseTransport, _GuardedProtocol] = {}
        self._server: asyncio.Server | None = None
        self._timeout_log = LogSummary(log, f"{name}: requests timed out")
        self.middleware: Middleware = self._make_middleware()

    @property
    def port(self) -> int:
        """The bound port (useful with port 0); only after :meth:`listen`."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the HTTP server is not listening")
        return int(self._server.sockets[0].getsockname()[1])

    async def listen(self, runner: web.AppRunner, host: str, port: int) -> None:
        """Accept connections on ``host:port`` for ``runner`` (after ``runner.setup()``)."""
        factory = runner.server
        if factory is None:
            raise RuntimeError("call runner.setup() before listen()")
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _GuardedProtocol(self, factory()), host, port
        )

    def close(self) -> None:
        """Stop accepting; connections already open are left to ``runner.cleanup()``."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self._timeout_log.close()
        self.gate.close()

    def track(self, transport: asyncio.BaseTransport, protocol: _GuardedProtocol) -> None:
        """Remember which connection a request's transport belongs to."""
        self._by_transport[transport] = protocol

    def untrack(self, transport: asyncio.BaseTransport) -> None:
        """Forget a connection that has ended."""
        self._by_transport.pop(transport, None)

    def timed_out(self, peer: str, phase: str) -> None:
        """Count and log (collapsed per peer) a connection closed by a deadline."""
        self.timeouts += 1
        self._timeout_log.note(
            peer, "HTTP: closed a connection from %s: request %s timed out", loggable(peer), phase
        )

    def _make_middleware(self) -> Middleware:
        @web.middleware
        async def deadlines(request: web.Request, handler: Handler) -> web.StreamResponse:
            transport = request.transport
            protocol = self._by_transport.get(transport) if transport is not None else None
            if protocol is None:  # served through another listener (tests' TestServer)
                return await handler(request)
            protocol.request_started(request)
            try:
                return await handler(request)
            except ConnectionResetError:
                gone = request.transport is None or request.transport.is_closing()
                if not gone:
                    raise
                # The client left mid-request, or a deadline dropped it: there is no one
                # to answer, and aiohttp would log a traceback per such request, an
                # unauthenticated way to flood the log. An HTTP error ends it quietly.
                raise web.HTTPRequestTimeout() from None
            finally:
                protocol.request_finished()

        return deadlines
