"""Failed admin API authentications, limited and logged per peer.

Without a limit anyone reaching the port could try keys as fast as the server answers
(a thousand in a quarter second), each leaving a log line. Each IP address (an IPv6
client: its /64 network) gets
``max_failures`` failed attempts at once and regains one every ``window / max_failures``
seconds; an address with none left is answered 429 with ``Retry-After`` *before* its
key is checked, so guessing stops paying even with the right key in the batch. Failures
and refusals of one address are logged as one line, then one count per minute.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from aiohttp import web

from picobot.admin.http import error_response
from picobot.logsafe import LogSummary, loggable
from picobot.ratelimit import PeerBuckets, peer_key

log = logging.getLogger(__name__)


def peer_of(request: web.Request) -> str:
    """The client as the limit counts it (its IPv4 address or IPv6 /64; ``?`` unknown)."""
    return peer_key(request.remote) if request.remote else "?"


class FailedAuthLimit:
    """Per-peer budget of failed authentications; see the module docstring."""

    def __init__(
        self,
        max_failures: int,
        window_secs: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        summary_secs: float = 60.0,
    ) -> None:
        self._buckets = PeerBuckets(max_failures, window_secs, clock)
        self._log = LogSummary(
            log, "admin API: failed or refused authentications", interval_secs=summary_secs
        )

    def refusal(self, request: web.Request) -> web.Response | None:
        """A 429 for a peer out of attempts (logged with its failures), else None."""
        peer = peer_of(request)
        wait = self._buckets.retry_after(peer)
        if wait is None:
            return None
        self._note(request, peer, f"too many failed attempts, told to retry in {wait}s")
        return error_response(
            429,
            "too_many_failures",
            "Too many failed authentications from this address; retry later.",
            {"Retry-After": str(wait)},
        )

    def failed(self, request: web.Request) -> None:
        """Count one failed authentication of the request's peer and log it (collapsed)."""
        peer = peer_of(request)
        self._buckets.spend(peer)
        self._note(request, peer, "missing or invalid key")

    def _note(self, request: web.Request, peer: str, why: str) -> None:
        self._log.note(
            peer,
            "admin API refused %s %s from %s: %s",
            loggable(request.method),
            loggable(request.path),
            loggable(peer),
            why,
        )

    def close(self) -> None:
        """Log the counts still pending."""
        self._log.close()
