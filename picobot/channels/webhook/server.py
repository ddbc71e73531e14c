"""The webhook core: one route per platform, a durable inbox, a durable reply queue.

A request is checked and acknowledged fast: size limit, raw body, the platform's
handshake, signature and parse, the allow-list, the message's age, then each message is
committed to the inbox (a message id seen before is skipped, also after a purge: see
:mod:`picobot.store.channels.webhook_seen`) and the platform gets 200 before any model runs, so
it never times out and redelivers. A message older than ``max_message_age_secs`` by
the time the platform signed or vouched for is acknowledged but dropped: it is a
replay, or a redelivery so late that its answer would only confuse. The workers of
:mod:`picobot.channels.webhook.workers` and :mod:`.delivery` then run the turns and
deliver the replies.

Guarantees: an acknowledged message is answered even across a crash (pending inbox
rows and due replies are picked up by :meth:`WebhookServer.start`); a reply is
enqueued exactly once; a reply is sent at least once (a crash between the platform's
200 and recording it sends it again). A crash in the middle of a turn runs that turn
again on restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Sequence
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp import web

from picobot.backoff import Backoff
from picobot.channels.webhook.base import Platform, PlatformMessage, WebhookError
from picobot.channels.webhook.delivery import DeliveryWorker
from picobot.channels.webhook.workers import TURN_TASK, InboxWorker, WebhookStats, WorkerContext
from picobot.config.channels import WebhookSettings
from picobot.errors import StoreUnavailable
from picobot.kernel.kernel import Kernel
from picobot.logsafe import loggable
from picobot.messages import storable
from picobot.store.channels.webhooks import WebhookStore
from picobot.tasks.supervisor import TaskSupervisor

__all__ = ["WebhookServer", "WebhookStats"]

log = logging.getLogger(__name__)

MAX_FUTURE_SECS = 3600
"""How far ahead of our clock a message's send time may be (clocks disagree)."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class WebhookServer:
    """Routes for every platform plus the inbox and delivery workers.

    ``max_attempts`` bounds the delivery attempts of a reply (``[server]
    outbound_max_attempts``); retries wait ``backoff_base_secs * 2**(n-1)`` up to
    ``backoff_cap_secs``, or longer when the platform says Retry-After. ``concurrency``
    bounds turns and sends in flight (each); ``store_retry_secs`` is the pause after a
    store failure. ``routed`` names the platforms that get a webhook route (default:
    all); the others reach the inbox through :meth:`take`. ``session`` is used for
    platform API calls (one is created and closed here if not given). The workers run
    as tasks of ``supervisor``.
    """

    def __init__(
        self,
        kernel: Kernel,
        platforms: Sequence[Platform],
        settings: WebhookSettings,
        *,
        store: WebhookStore,
        max_attempts: int,
        supervisor: TaskSupervisor,
        session: aiohttp.ClientSession | None = None,
        clock: Callable[[], float] = time.time,
        backoff_base_secs: float = 1.0,
        backoff_cap_secs: float = 300.0,
        concurrency: int = 8,
        store_retry_secs: float = 5.0,
        routed: Collection[str] | None = None,
    ) -> None:
        self._platforms: dict[str, Platform] = {}
        for platform in platforms:
            if platform.name in self._platforms:
                raise ValueError(f"two webhook platforms are named {platform.name!r}")
            self._platforms[platform.name] = platform
        self._routed = set(self._platforms if routed is None else routed)
        self._max_body = settings.max_body_bytes
        self._max_age = settings.max_message_age_secs
        self._clock = clock
        self.store = store
        self._supervisor = supervisor
        self._session = session
        self._own_session = session is None
        self.stats = WebhookStats()
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loops: set[asyncio.Task[None]] = set()
        self._started = False
        ctx = WorkerContext(
            platforms=self._platforms,
            store=store,
            stats=self.stats,
            changed=self._notify,
            spawn=self._spawn,
            concurrency=concurrency,
            store_retry_secs=store_retry_secs,
        )
        self._inbox = InboxWorker(ctx, kernel)
        self._delivery = DeliveryWorker(
            ctx,
            max_attempts=max_attempts,
            backoff=Backoff(base_secs=backoff_base_secs, cap_secs=backoff_cap_secs),
            clock=clock,
        )
        # A processed message with replies is the delivery worker's cue.
        self._inbox.on_enqueued = self._delivery.wake

    @property
    def max_body_bytes(self) -> int:
        """The largest body accepted (``[channels.webhook] max_body_bytes``); outbound
        connections skip a fetched update or event larger than that."""
        return self._max_body

    @property
    def platforms(self) -> dict[str, Platform]:
        """The served platforms by name."""
        return dict(self._platforms)

    def routes(self) -> list[web.RouteDef]:
        """GET and POST ``/webhooks/<name>`` for every routed platform."""
        defs: list[web.RouteDef] = []
        for name, platform in self._platforms.items():
            if name not in self._routed:
                continue
            handler = self._handler(platform)
            defs += [web.get(f"/webhooks/{name}", handler), web.post(f"/webhooks/{name}", handler)]
        return defs

    def add_routes(self, app: web.Application) -> None:
        """Mount the webhook routes on ``app`` (shared with the admin API)."""
        app.add_routes(self.routes())

    async def start(self) -> None:
        """Start the workers; their first pass resumes what a previous run left pending."""
        if self._started:
            raise RuntimeError("the webhook server is already started")
        self._started = True
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        self._delivery.session = self._session
        self._loops = {
            self._spawn("webhook-inbox", self._inbox.run()),
            self._spawn("webhook-delivery", self._delivery.run()),
        }

    async def close(self, grace_secs: float = 0.0) -> None:
        """Take up no new turns, let turns in flight finish and the replies due (theirs
        too) go out for up to ``grace_secs``, then cancel the rest (it stays pending for
        the next start).

        Requests are still accepted into the inbox meanwhile: nothing acknowledged is
        lost, it is only answered after the restart.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_secs
        self._inbox.stop()
        turns = {t for t in self._tasks if t.get_name() == TURN_TASK}
        if turns and grace_secs > 0:
            await asyncio.wait(turns, timeout=grace_secs)
        if deadline > loop.time() and not all(t.done() for t in self._loops):
            # The delivery worker runs on until nothing is due or in flight (a reply
            # waiting for a retry waits for the next start).
            self._delivery.idle.clear()
            self._delivery.wake()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._delivery.idle.wait(), deadline - loop.time())
        self._delivery.stop()
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._own_session and self._session is not None:
            await self._session.close()
        self._session = self._delivery.session = None

    async def __aenter__(self) -> WebhookServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def queue_depth(self) -> int:
        """Replies waiting to be delivered."""
        return await self.store.queue_depth()

    def wake(self) -> None:
        """Look for work now (pending messages, due replies)."""
        self._inbox.wake()
        self._delivery.wake()

    async def wait_for(self, predicate: Callable[[WebhookStats], bool]) -> WebhookStats:
        """Wait until ``predicate(stats)`` holds (tests, health checks)."""
        while not predicate(self.stats):
            await self._changed.wait()
        return self.stats

    def _spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self._supervisor.spawn(name, coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _notify(self) -> None:
        # A fresh event per change: every waiter re-checks its predicate once.
        self._changed.set()
        self._changed = asyncio.Event()

    # Requests ------------------------------------------------------------------

    def _handler(self, platform: Platform) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self._receive(platform, request)

        return handle

    async def _receive(self, platform: Platform, request: web.Request) -> web.StreamResponse:
        name = platform.name
        length = request.content_length
        too_long = length is not None and length > self._max_body
        body = None if too_long else await _read(request, self._max_body)
        if body is None:
            log.warning("%s webhook: body over %d bytes refused", name, self._max_body)
            return _error(413, "body too large")
        try:
            answer = await platform.handshake(request, body)
            if answer is not None:
                return answer
            if request.method != "POST":
                return _error(405, "method not allowed")
            self._verify(platform, request, body)
            messages = platform.parse(body)
            if not all(_storable(platform, m) for m in messages):
                raise WebhookError(400, "text is not valid Unicode")
        except WebhookError as exc:
            log.warning("%s webhook refused (%d): %s", name, exc.status, loggable(exc.reason))
            return _error(exc.status, exc.reason)
        except Exception:
            log.exception("%s webhook: failed to read a request", name)
            return _error(400, "malformed request")
        try:
            for msg in messages:
                await self._admit(platform, msg)
        except StoreUnavailable:
            # Not durable, so not acknowledged: the platform will deliver it again.
            log.exception("%s webhook: could not store a message", name)
            return _error(503, "temporarily unavailable")
        self._inbox.wake()
        return web.json_response({"ok": True})

    def _verify(self, platform: Platform, request: web.Request, body: bytes) -> None:
        try:
            platform.verify(request, body)
        except WebhookError:
            self.stats.rejected_signature += 1
            self._notify()
            raise
        except Exception:
            # A broken check denies: deny by default.
            log.exception("%s webhook: signature check failed", platform.name)
            self.stats.rejected_signature += 1
            self._notify()
            raise WebhookError(401, "signature check failed") from None

    async def take(
        self,
        platform: Platform,
        messages: Sequence[PlatformMessage],
        *,
        next_offset: int | None = None,
    ) -> None:
        """Admit messages that a connection of ours fetched (long polling, Socket Mode)
        as a webhook request's are: allow-list, age, replay guard, durable inbox.

        With ``next_offset`` the platform's offset is saved in the same transaction, so
        it moves past these messages exactly when they are stored. A message that cannot
        be stored (not valid Unicode) is skipped with a warning. Raises StoreUnavailable
        when nothing was stored: the caller must fetch the messages again.
        """
        admitted = [m for m in messages if _storable(platform, m) and self._admissible(platform, m)]
        keys = [(m, platform.seen_key(m.message_id)) for m in admitted]
        ids = await self.store.accept_many(platform.name, keys, next_offset=next_offset)
        for msg, inbox_id in zip(admitted, ids, strict=True):
            self._count(platform, msg, inbox_id)
        self._notify()
        if admitted:
            self._inbox.wake()

    async def _admit(self, platform: Platform, msg: PlatformMessage) -> None:
        if self._admissible(platform, msg):
            key = platform.seen_key(msg.message_id)
            self._count(platform, msg, await self.store.accept(platform.name, msg, seen_key=key))
        self._notify()

    def _admissible(self, platform: Platform, msg: PlatformMessage) -> bool:
        """Whether the sender is allowed and the message fresh (counted and logged if not)."""
        allowed = platform.allowed_senders
        if allowed and msg.sender not in allowed:
            # Still 200: the platform must not retry a message we chose to ignore.
            log.info(
                "%s webhook: ignored a sender not allowed: %s", platform.name, loggable(msg.sender)
            )
            self.stats.ignored_senders += 1
            return False
        if self._stale(msg):
            # Still 200, for the same reason; the log names no id and no text.
            log.warning(
                "%s webhook: dropped a message sent more than %ds ago (a replay or a very"
                " late redelivery)",
                platform.name,
                self._max_age,
            )
            self.stats.stale += 1
            return False
        return True

    def _count(self, platform: Platform, msg: PlatformMessage, inbox_id: int | None) -> None:
        if inbox_id is None:
            log.info(
                "%s webhook: message %s already received", platform.name, loggable(msg.message_id)
            )
            self.stats.duplicates += 1
        else:
            self.stats.accepted += 1

    def _stale(self, msg: PlatformMessage) -> bool:
        """Whether the message's vouched-for send time is outside the accepted window.

        A time far in the future is refused too: its record would be pruned while the
        message still counted as fresh.
        """
        if msg.sent_at is None:
            return False
        age = self._clock() - msg.sent_at
        return age > self._max_age or age < -MAX_FUTURE_SECS


def _storable(platform: Platform, msg: PlatformMessage) -> bool:
    """Whether every text of ``msg`` can be stored (no lone surrogates); warns if not."""
    reply_to = json.dumps(msg.reply_to, ensure_ascii=False)
    if storable(msg.message_id, msg.user_id, msg.chat_id, msg.sender, msg.text, reply_to):
        return True
    log.warning("%s: skipped a message whose text is not valid Unicode", platform.name)
    return False


async def _read(request: web.Request, limit: int) -> bytes | None:
    """The raw body, or None as soon as it grows past ``limit`` (never buffered whole)."""
    body = bytearray()
    async for chunk in request.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)
