"""Connection caps for the network listeners: per process and per peer.

A listener keeps a descriptor per open connection, so clients that open connections and
hold them (slowloris) could otherwise exhaust the process's descriptors and starve
everyone: health checks, signed webhooks, chat. A :class:`ConnectionGate` counts the
open connections of one listener; one over a cap is answered ``503`` with
``Retry-After`` and closed at once, before any byte of it is read, and the refusals
are logged as one line per peer per minute with their count.

The aiohttp server (webhooks, admin API) is gated by :mod:`picobot.channels.http_guard`;
the WebSocket channel by :func:`gated_connection_class`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.server import ServerConnection

from picobot.logsafe import LogSummary, loggable
from picobot.ratelimit import peer_key

log = logging.getLogger(__name__)

REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Retry-After: 1\r\n"
    b"Content-Type: text/plain\r\n"
    b"Content-Length: 21\r\n"
    b"Connection: close\r\n"
    b"\r\n"
    b"Too many connections\n"
)
"""What a connection over a cap gets: a complete HTTP answer, so a client sees why."""


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Caps of one listener: ``max_connections`` in all, ``max_per_peer`` from one address
    (0 = no per-peer cap, e.g. behind a reverse proxy that all connections come from)."""

    max_connections: int
    max_per_peer: int


def peer_address(transport: asyncio.BaseTransport) -> str:
    """The peer as per-peer caps count it (:func:`picobot.ratelimit.peer_key`); ``?``
    when the socket does not say."""
    peer: Any = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        return peer_key(str(peer[0]))
    return "?"


class ConnectionGate:
    """Counts the open connections of one listener; admits or refuses new ones."""

    def __init__(self, limits: ConnectionLimits, name: str) -> None:
        self.limits = limits
        self.name = name
        self.open = 0
        self.refused = 0
        self._by_peer: dict[str, int] = {}
        self._refusals = LogSummary(log, f"{name}: connections refused")

    def admit(self, transport: asyncio.BaseTransport) -> str | None:
        """The peer's address if the connection may stay (it is counted: call
        :meth:`release` when it ends), else None, and it has been answered 503 and closed."""
        peer = peer_address(transport)
        per_peer = self._by_peer.get(peer, 0)
        cap = self.limits.max_per_peer
        if self.open >= self.limits.max_connections:
            why = f"{self.limits.max_connections} connections open"
        elif cap and per_peer >= cap:
            why = f"{cap} connections open from this peer"
        else:
            self.open += 1
            self._by_peer[peer] = per_peer + 1
            return peer
        self.refused += 1
        self._refusals.note(
            peer, "%s: refused a connection from %s: %s", self.name, loggable(peer), why
        )
        if isinstance(transport, asyncio.WriteTransport):
            transport.write(REFUSAL)
        transport.close()
        return None

    def release(self, peer: str) -> None:
        """One connection of ``peer`` has ended."""
        self.open -= 1
        left = self._by_peer.get(peer, 0) - 1
        if left > 0:
            self._by_peer[peer] = left
        else:
            self._by_peer.pop(peer, None)

    def close(self) -> None:
        """Log the refusal counts still pending."""
        self._refusals.close()


def gated_connection_class(gate: ConnectionGate) -> type[ServerConnection]:
    """A websockets ``ServerConnection`` (its ``create_connection``) that asks ``gate``
    first: a refused connection never starts its handshake."""

    class GatedConnection(ServerConnection):
        _peer: str | None = None
        _refused = False

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self._peer = gate.admit(transport)
            if self._peer is None:
                self._refused = True
                return
            super().connection_made(transport)

        def data_received(self, data: bytes) -> None:
            if not self._refused:
                super().data_received(data)

        def eof_received(self) -> None:
            if not self._refused:
                super().eof_received()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            if self._peer is not None:
                gate.release(self._peer)
                self._peer = None
            super().connection_lost(exc)

    return GatedConnection


ACCEPT_FAILED = "socket.accept() out of system resource"
"""asyncio's report of a failed accept (out of descriptors); it retries a second later."""


@contextlib.contextmanager
def accept_errors_summarized(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """While inside, asyncio's failed-accept reports are one line per minute with a
    count, instead of a traceback each (tens of MB a minute when descriptors run out);
    every other report goes where it went before."""
    previous = loop.get_exception_handler()
    summary = LogSummary(log, "accept errors", level=logging.ERROR)

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == ACCEPT_FAILED:
            summary.note(
                "this process",
                "cannot accept connections: %s; raise the open-file limit (ulimit -n) or"
                " lower max_connections",
                loggable(context.get("exception")),
            )
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)
    try:
        yield
    finally:
        loop.set_exception_handler(previous)
        summary.close()


RESERVED_DESCRIPTORS = 64
"""Descriptors kept for everything but client connections: the database, the log,
outgoing platform requests."""


def descriptor_shortfall(connections: int) -> str | None:
    """Why ``connections`` client connections may not fit the open-file limit, or None."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not Unix
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = connections + RESERVED_DESCRIPTORS
    if soft == resource.RLIM_INFINITY or need <= soft:
        return None
    return (
        f"the connection caps allow {connections} connections, which with"
        f" {RESERVED_DESCRIPTORS} descriptors for the rest need {need}, but the open-file"
        f" limit is {soft}: raise it (ulimit -n) or lower [server] max_connections and"
        " [channels.websocket] max_connections"
    )
