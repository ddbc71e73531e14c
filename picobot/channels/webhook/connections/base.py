"""What every outbound connection shares: its status, the retry loop, the owner.

An outbound connection is one PicoBot opens to a platform (Telegram long polling,
Slack Socket Mode) so that a machine without a public address can chat. It hands the
messages it fetches to the webhook core (:meth:`WebhookServer.take`, the :class:`Sink`
here), so they go through the same allow-list, replay guard, durable inbox and reply
queue as webhooks.

:meth:`PlatformConnection.run` runs a connection's session again and again: a session
that returns (a platform asked us to reconnect) is opened again, one that fails waits by
exponential backoff (or the platform's retry-after, if longer) first, and never are two
attempts less than ``floor_secs`` apart (1 s), so a platform that disconnects or answers
at once cannot make a hot loop; what it makes us log is rate-limited the same way.
:class:`ConnectionStatus` is what ``/metrics`` shows and what is recorded in the store
for ``picobot status``. :class:`OutboundConnections` starts them with ``serve`` and
cancels them on shutdown; an interrupted fetch is fetched again on the next start.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

import aiohttp

from picobot.backoff import Backoff
from picobot.channels.webhook.base import DeliveryError, Platform, PlatformMessage
from picobot.errors import StoreUnavailable
from picobot.logsafe import LogSummary
from picobot.store.channels.channel_state import ChannelState, ConnectionRecord
from picobot.tasks.supervisor import TaskSupervisor

log = logging.getLogger(__name__)

P = TypeVar("P", bound=Platform)

DEFAULT_BACKOFF = Backoff(base_secs=1.0, cap_secs=60.0, jitter=0.2)
"""Waits after failures in a row: 1 s doubling up to a minute, spread by up to 20 %."""
ATTEMPT_FLOOR_SECS = 1.0
"""The shortest time between two connection attempts (or two polls that brought
nothing): a platform that answers at once, or asks to reconnect at once, is called at
most once a second, not thousands of times."""
LOG_INTERVAL_SECS = 60.0
"""A line a platform could make us repeat is logged once per kind per this interval,
then counted (:class:`~picobot.logsafe.LogSummary`)."""


class Sink(Protocol):
    """Where fetched messages go: the webhook core's admission and inbox."""

    @property
    def max_body_bytes(self) -> int:
        """The largest webhook body accepted: a fetched update or event larger than
        that (as JSON) is skipped, so every transport has the same limit."""
        ...

    async def take(
        self,
        platform: Platform,
        messages: Sequence[PlatformMessage],
        *,
        next_offset: int | None = None,
    ) -> None:
        """Admit ``messages`` durably (with the platform's offset, if given)."""
        ...


class ConnectionStatus:
    """One outbound connection's state, counters and last error, kept in memory and
    recorded in the store (errors never hold a secret or message content)."""

    def __init__(
        self,
        channel: str,
        mode: str,
        state: ChannelState,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.channel = channel
        self.mode = mode
        self.state = "connecting"
        self.since = clock()
        self.last_update_at: float | None = None
        self.errors = 0
        self.last_error: str | None = None
        self.failures_in_row = 0
        self._store = state
        self._clock = clock
        self._changed = asyncio.Event()

    @property
    def connected(self) -> bool:
        """Whether the connection is up now."""
        return self.state == "connected"

    async def enter(self, state: str) -> None:
        """Move to ``state`` (connecting, connected, stopped) and record it.

        Being connected ends a run of failures: the next one waits the shortest time.
        """
        if state == "connected":
            self.failures_in_row = 0
        if state != self.state:
            self.state, self.since = state, self._clock()
            await self.save()

    async def received(self) -> None:
        """Something arrived from the platform just now."""
        self.last_update_at = self._clock()
        await self.save()

    async def failed(self, reason: str) -> int:
        """Count a failure (the connection retries); return the failures in a row."""
        self.errors += 1
        self.failures_in_row += 1
        self.last_error = reason
        self.state, self.since = "retrying", self._clock()
        await self.save()
        return self.failures_in_row

    async def save(self) -> None:
        """Record the status; a store failure is logged, never raised (it is only status)."""
        record = ConnectionRecord(
            channel=self.channel,
            mode=self.mode,
            state=self.state,
            since=self.since,
            last_update_at=self.last_update_at,
            errors=self.errors,
            last_error=self.last_error,
            updated_at=self._clock(),
        )
        try:
            await self._store.record(record)
        except StoreUnavailable:
            log.warning("%s: could not record the connection status", self.channel)
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(self, predicate: Callable[[ConnectionStatus], bool]) -> None:
        """Wait until ``predicate(self)`` holds (tests, health checks)."""
        while not predicate(self):
            await self._changed.wait()


class Connection(Protocol):
    """One outbound connection to a platform."""

    @property
    def status(self) -> ConnectionStatus:
        """Its state for /metrics and ``picobot status``."""
        ...

    async def run(self) -> None:
        """Stay connected until cancelled."""
        ...


class PlatformConnection(Generic[P]):
    """The common part of a connection to platform ``P``: what it feeds, its status,
    and :meth:`run`, which keeps :meth:`session` going with one HTTP client session."""

    mode = ""
    """The config ``mode`` it serves (``polling``, ``socket``)."""

    def __init__(
        self,
        platform: P,
        sink: Sink,
        state: ChannelState,
        *,
        backoff: Backoff = DEFAULT_BACKOFF,
        floor_secs: float = ATTEMPT_FLOOR_SECS,
    ) -> None:
        self.platform = platform
        self.sink = sink
        self.state = state
        self._backoff = backoff
        self._floor = floor_secs
        self._status = ConnectionStatus(platform.name, self.mode, state)
        self._summaries: list[LogSummary] = []
        channel = platform.name
        self._retries = self.log_summary(log, f"{channel}: connection failures")
        self._errors = self.log_summary(log, f"{channel}: errors", level=logging.ERROR)

    @property
    def status(self) -> ConnectionStatus:
        """The connection's state."""
        return self._status

    def log_summary(
        self, logger: logging.Logger, what: str, *, level: int = logging.WARNING
    ) -> LogSummary:
        """A :class:`LogSummary` on ``logger`` for lines the platform could make us
        repeat without end (one per kind a minute, then a count); its pending counts
        are logged when :meth:`run` ends."""
        summary = LogSummary(logger, what, interval_secs=LOG_INTERVAL_SECS, level=level)
        self._summaries.append(summary)
        return summary

    async def run(self) -> None:
        """Stay connected until cancelled."""
        try:
            async with aiohttp.ClientSession() as http:
                await self._keep_connected(http)
        finally:
            for summary in self._summaries:
                summary.close()

    async def session(self, http: aiohttp.ClientSession) -> None:
        """One connection: return to reconnect, raise to back off first."""
        raise NotImplementedError

    async def pause(self, started: float) -> None:
        """Wait until ``floor_secs`` after ``started`` (the event loop's time): the
        floor between attempts, so a platform that answers at once cannot spin us."""
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, started + self._floor - loop.time()))

    async def _keep_connected(self, http: aiohttp.ClientSession) -> None:
        """Run :meth:`session` until cancelled: again when it returns, after a backoff
        when it fails; never twice within ``floor_secs``.

        A :class:`DeliveryError` is a failure the platform or the network reported (its
        text is already scrubbed of secrets); its ``retry_after_secs`` is a floor of the
        wait. Anything else is logged with its traceback and retried the same way: one
        bad answer must not end the channel. Each kind of failure is logged once a
        minute, then counted.
        """
        loop = asyncio.get_running_loop()
        channel = self._status.channel
        while True:
            started = loop.time()
            retry_after: float | None = None
            try:
                await self.session(http)
            except DeliveryError as exc:
                reason, retry_after = str(exc), exc.retry_after_secs
            except StoreUnavailable:
                reason = "the store is unavailable"
                self._errors.note(reason, "%s: %s", channel, reason, exc_info=True)
            except Exception as exc:
                reason = f"unexpected error: {type(exc).__name__}"
                self._errors.note(reason, "%s: the connection failed", channel, exc_info=True)
            else:
                await self.pause(started)
                continue
            failures = await self._status.failed(reason)
            delay = self._backoff.delay(failures, retry_after)
            delay = max(delay, started + self._floor - loop.time())
            self._retries.note(reason, "%s: %s; trying again in %.1fs", channel, reason, delay)
            await asyncio.sleep(delay)


class OutboundConnections:
    """Runs outbound connections as supervised tasks; :meth:`stop` ends them."""

    def __init__(self, connections: Sequence[Connection], supervisor: TaskSupervisor) -> None:
        self.connections = list(connections)
        self._supervisor = supervisor
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def statuses(self) -> list[ConnectionStatus]:
        """The status of every connection."""
        return [c.status for c in self.connections]

    def start(self) -> None:
        """Start every connection."""
        for connection in self.connections:
            name = f"connection-{connection.status.channel}"
            self._tasks.append(self._supervisor.spawn(name, connection.run()))

    async def stop(self) -> None:
        """Cancel every connection and wait for it; record each as stopped.

        Safe at any moment: what a connection fetched is stored with its offset in one
        transaction, or not at all and fetched again on the next start.
        """
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for status in self.statuses:
            await status.enter("stopped")
