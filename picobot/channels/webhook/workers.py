"""The two background workers of the webhook core: turns and deliveries.

:class:`InboxWorker` runs the turns of accepted messages: one at a time per chat (so
answers keep the order of questions), several chats at once. The replies of a turn
are enqueued in the same transaction that marks its message done.

:class:`DeliveryWorker` sends queued replies through the platform API with exponential
backoff. Only the oldest pending reply of a chat is ever due, so replies go out in
order even when one of them waits for a retry. A purged user's last reply is deleted
and erased once sent or given up on (:mod:`picobot.privacy.purged_replies`).

Messages and replies of a platform that is not enabled are left in their queues, out of
the way of the others, with one warning from each worker at start.

Both sleep on an :class:`asyncio.Event` (plus, for deliveries, a timer until the next
retry is due); neither polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from picobot.backoff import Backoff
from picobot.channels.webhook.base import DeliveryError, Platform
from picobot.channels.webhook.common import split_text
from picobot.errors import StoreUnavailable
from picobot.kernel.kernel import Kernel
from picobot.messages import Identity, Inbound, OutboundKind
from picobot.privacy.purged_replies import forget_reply
from picobot.store.channels.webhooks import InboxItem, OutboundItem, WebhookStore

log = logging.getLogger(__name__)

SORRY = "Sorry, something went wrong on my side and I could not answer that message."
REPLY_KINDS = frozenset(
    {OutboundKind.DONE, OutboundKind.NOTICE, OutboundKind.ERROR, OutboundKind.CONFIRM_REQUEST}
)
MAX_TURN_ATTEMPTS = 3
"""A message whose turn was started this often without being marked done (it keeps
crashing the process, say) is answered with an apology instead of being run again."""
BATCH = 100
TURN_TASK = "webhook-chat"
"""Name of the tasks that run one chat's turns."""

Spawn = Callable[[str, Coroutine[Any, Any, None]], object]


@dataclass(slots=True)
class WebhookStats:
    """Counters since start, for metrics; they only ever grow."""

    accepted: int = 0
    duplicates: int = 0
    rejected_signature: int = 0
    ignored_senders: int = 0
    stale: int = 0
    processed: int = 0
    delivered: int = 0
    delivery_retries: int = 0
    delivery_failures: int = 0


@dataclass(frozen=True, slots=True)
class WorkerContext:
    """What both workers share with the server."""

    platforms: Mapping[str, Platform]
    store: WebhookStore
    stats: WebhookStats
    changed: Callable[[], None]
    """Called after the counters changed (wakes :meth:`WebhookServer.wait_for`)."""
    spawn: Spawn
    """Starts a tracked background task."""
    concurrency: int = 8
    store_retry_secs: float = 5.0


class _Worker:
    """The wake-up, the in-flight set and the store-failure retry timer."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.wake_event = asyncio.Event()
        self.slots = asyncio.Semaphore(ctx.concurrency)
        self.stopping = False
        self.inflight: set[int] = set()
        self._retry_pending = False
        self._timers: set[asyncio.TimerHandle] = set()
        self._checked_disabled = False

    async def warn_disabled_once(
        self, what: str, done: str, counts: Callable[[], Awaitable[dict[str, int]]]
    ) -> None:
        """Say, once, if ``what`` wait for platforms that are not enabled.

        They are kept (enabling the platform again handles them) but left alone while it
        is off, so the operator should know; the log names platforms and a count only.
        ``counts`` gives the pending ``what`` per platform.
        """
        if self._checked_disabled:
            return
        waiting = {
            name: n for name, n in (await counts()).items() if name not in self.ctx.platforms
        }
        self._checked_disabled = True
        if waiting:
            log.warning(
                "%d webhook %s wait for platforms that are not enabled (%s); they are kept"
                " and %s once the platform is enabled again",
                sum(waiting.values()),
                what,
                ", ".join(sorted(waiting)),
                done,
            )

    def wake(self) -> None:
        """Look for work now."""
        self.wake_event.set()

    def later(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` after the store-retry delay (cancelled by :meth:`stop`)."""

        def fire() -> None:
            self._timers.discard(timer)
            fn()

        timer = asyncio.get_running_loop().call_later(self.ctx.store_retry_secs, fire)
        self._timers.add(timer)

    def retry_later(self) -> None:
        """Look again after a store failure, without spinning while it lasts."""
        if self._retry_pending:
            return
        self._retry_pending = True

        def retry() -> None:
            self._retry_pending = False
            self.wake_event.set()

        self.later(retry)

    def stop(self) -> None:
        """Take up no new work (work in flight finishes)."""
        self.stopping = True
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()


class InboxWorker(_Worker):
    """Runs the turns of pending inbox messages."""

    def __init__(self, ctx: WorkerContext, kernel: Kernel) -> None:
        super().__init__(ctx)
        self.kernel = kernel
        self.on_enqueued: Callable[[], None] = lambda: None
        self._chats: dict[tuple[str, str], deque[InboxItem]] = {}

    async def run(self) -> None:
        """Dispatch pending messages whenever woken; the first pass resumes old work."""
        while True:
            self.wake_event.clear()
            if not self.stopping:
                await self._dispatch()
            await self.wake_event.wait()

    async def _dispatch(self) -> None:
        """Hand every pending message not in flight to its chat's worker, in id order."""
        after = 0
        while True:
            try:
                await self.warn_disabled_once(
                    "messages", "answered", self.ctx.store.pending_messages_by_platform
                )
                items = await self.ctx.store.pending_inbox(
                    BATCH, self.ctx.platforms.keys(), after_id=after
                )
            except StoreUnavailable:
                log.exception("webhook inbox unavailable")
                self.retry_later()
                return
            for item in items:
                if item.id in self.inflight:
                    continue
                self.inflight.add(item.id)
                key = (item.platform, item.chat_id)
                if key in self._chats:
                    self._chats[key].append(item)
                else:
                    self._chats[key] = deque([item])
                    self.ctx.spawn(TURN_TASK, self._chat(key))
            if len(items) < BATCH:
                return
            after = items[-1].id

    async def _chat(self, key: tuple[str, str]) -> None:
        """Process one chat's messages in order; stop at the first store failure."""
        queue = self._chats[key]
        try:
            while queue and not self.stopping:
                async with self.slots:
                    await self._process(queue[0])
                self.inflight.discard(queue.popleft().id)
        except StoreUnavailable:
            # The message stays pending; later ones of this chat must not overtake it.
            log.exception("webhook inbox: store unavailable; retrying shortly")
            self.retry_later()
        finally:
            for item in queue:
                self.inflight.discard(item.id)
            del self._chats[key]

    async def _process(self, item: InboxItem) -> None:
        platform = self.ctx.platforms[item.platform]
        # Claimed in the writer: a stale read of the dispatcher can never run a turn twice.
        attempt = await self.ctx.store.start_processing(item.id)
        if attempt is None:
            return
        session_id: str | None = None
        if attempt > MAX_TURN_ATTEMPTS:
            log.error("webhook message %d given up after %d attempts", item.id, attempt - 1)
            replies, failed = [SORRY], True
        else:
            replies, failed, session_id = await self._turn(platform, item)
        enqueued = await self.ctx.store.mark_processed(
            item.id,
            as_messages(replies, platform.max_text_chars),
            platform=platform.name,
            reply_to=item.reply_to,
            user_id=item.user_id,
            chat_id=item.chat_id,
            session_id=session_id,
            failed=failed,
        )
        self.ctx.stats.processed += 1
        self.ctx.changed()
        if enqueued:
            self.on_enqueued()

    async def _turn(
        self, platform: Platform, item: InboxItem
    ) -> tuple[list[str], bool, str | None]:
        """The texts to send back for one message, whether the turn failed, and the
        session it ran in (the last one its events named), which the replies belong to."""
        identity = Identity(platform.name, item.user_id, item.chat_id)
        inbound = Inbound(identity, item.text, message_id=item.message_id)
        replies: list[str] = []
        session_id: str | None = None
        try:
            async for event in self.kernel.handle(inbound):
                session_id = event.session_id or session_id
                if event.kind in REPLY_KINDS and event.text:
                    replies.append(event.text)
        except Exception:
            # The kernel handles its own failures, so this is a bug; never send str(exc).
            log.exception("webhook turn failed for message %d", item.id)
            return [*replies, SORRY], True, session_id
        return replies, False, session_id


def as_messages(replies: list[str], limit: int | None) -> list[str]:
    """The replies as the platform's messages: each cut to ``limit`` (None: kept whole)."""
    if limit is None:
        return replies
    return [part for reply in replies for part in split_text(reply, limit)]


class DeliveryWorker(_Worker):
    """Sends due replies through their platform, retrying with backoff."""

    def __init__(
        self,
        ctx: WorkerContext,
        *,
        max_attempts: int,
        backoff: Backoff,
        clock: Callable[[], float],
    ) -> None:
        super().__init__(ctx)
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.clock = clock
        self.session: aiohttp.ClientSession | None = None
        self.idle = asyncio.Event()
        """Set when a pass found nothing to send now and no send is in flight."""

    async def run(self) -> None:
        """Send what is due whenever woken, or when the next retry comes due."""
        while True:
            self.wake_event.clear()
            timeout = None if self.stopping else await self._dispatch()
            if not self.inflight:
                self.idle.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake_event.wait(), timeout)

    async def _dispatch(self) -> float | None:
        """Start sending every due chat head; return seconds until the next one is due."""
        try:
            await self.warn_disabled_once(
                "replies", "sent", self.ctx.store.pending_replies_by_platform
            )
            heads = await self.ctx.store.outbound_heads(BATCH, self.ctx.platforms.keys())
        except StoreUnavailable:
            log.exception("webhook outbound queue unavailable")
            return self.ctx.store_retry_secs
        now = self.clock()
        next_in: float | None = None
        for item in heads:
            if item.id in self.inflight:
                continue
            if item.next_attempt_at > now:
                wait = item.next_attempt_at - now
                next_in = wait if next_in is None else min(next_in, wait)
                continue
            self.inflight.add(item.id)
            self.ctx.spawn("webhook-send", self._deliver(item))
        return next_in

    async def _deliver(self, stale: OutboundItem) -> None:
        parked = False
        try:
            async with self.slots:
                await self._attempt(stale)
        except StoreUnavailable:
            log.exception("webhook outbound queue unavailable; reply %d stays pending", stale.id)
            # Parked for a while: with a read-only store, a sent reply that cannot be
            # marked sent would otherwise be sent again and again at once.
            parked = True
            self.later(lambda: self._release(stale.id))
        finally:
            if not parked:
                self._release(stale.id)

    async def _attempt(self, stale: OutboundItem) -> None:
        # The dispatcher's read may predate the last attempt: use the row as it is now.
        item = await self.ctx.store.due_item(stale.id, self.clock())
        if item is None:
            return
        platform = self.ctx.platforms[item.platform]
        if self.session is None:
            raise RuntimeError("the delivery worker has no HTTP session")
        try:
            await platform.send(self.session, item.reply_to, item.text)
        except DeliveryError as exc:
            await self._failed(item, str(exc), exc.retry, exc.retry_after_secs)
        except Exception as exc:
            # A platform bug or an unwrapped network error: worth another try.
            log.exception("%s delivery of reply %d raised", platform.name, item.id)
            await self._failed(item, type(exc).__name__, True, None)
        else:
            if item.purged:
                await forget_reply(self.ctx.store, item.id, self.clock)
            else:
                await self.ctx.store.mark_sent(item.id, self.clock())
            self.ctx.stats.delivered += 1

    def _release(self, outbound_id: int) -> None:
        self.inflight.discard(outbound_id)
        self.ctx.changed()
        self.wake_event.set()

    async def _failed(
        self, item: OutboundItem, reason: str, retry: bool, retry_after: float | None
    ) -> None:
        attempts = item.attempts + 1
        if not retry or attempts >= self.max_attempts:
            log.warning(
                "%s reply %d failed for good after %d attempts: %s",
                item.platform,
                item.id,
                attempts,
                reason,
            )
            if item.purged:
                await forget_reply(self.ctx.store, item.id, self.clock)
            else:
                await self.ctx.store.mark_failed(item.id, reason)
            self.ctx.stats.delivery_failures += 1
            return
        delay = self.backoff.delay(attempts, retry_after)
        log.info("%s reply %d: %s; retry in %.1fs", item.platform, item.id, reason, delay)
        await self.ctx.store.mark_retry(item.id, reason, self.clock() + delay)
        self.ctx.stats.delivery_retries += 1
