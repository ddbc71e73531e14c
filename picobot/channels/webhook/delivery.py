"""The delivery worker of the webhook core: queued replies out through the platforms.

:class:`DeliveryWorker` sends queued replies through the platform API with exponential
backoff. Only the oldest pending reply of a chat is ever due, so replies go out in
order even when one of them waits for a retry. A purged user's last reply is deleted
and erased once sent or given up on (:mod:`picobot.privacy.purged_replies`). A reply
that hands over a file (``/export``) is sent through the platform's file API and its
file deleted once sent or given up on (:mod:`picobot.channels.webhook.documents`).

It sleeps on an :class:`asyncio.Event` plus a timer until the next retry is due; it
never polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import aiohttp

from picobot.backoff import Backoff
from picobot.channels.webhook import documents
from picobot.channels.webhook.base import DeliveryError
from picobot.channels.webhook.claims import POLL_SECS, kept
from picobot.channels.webhook.workers import BATCH, Worker, WorkerContext
from picobot.errors import StoreUnavailable
from picobot.privacy.purged_replies import forget_reply
from picobot.store.channels.webhooks import OutboundItem

log = logging.getLogger(__name__)


class DeliveryWorker(Worker):
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
            if self.stopping:
                # Ends by itself: Python 3.11's wait_for below returns, swallowing the
                # cancellation of close(), when a wake-up (a send released) comes with it.
                return
            timeout = await self._dispatch()
            if not self.inflight:
                self.idle.set()
            # Heads other instances left (their claims expired) are looked for again.
            timeout = POLL_SECS if timeout is None else min(timeout, POLL_SECS)
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
        item = await self.ctx.store.claim_due(stale.id, self.clock())
        if item is None:
            return  # sent, purged, not due, or another instance's now
        async with kept(self.ctx.store, "outbound_queue", item.id):
            await self._send(item)

    async def _send(self, item: OutboundItem) -> None:
        platform = self.ctx.platforms[item.platform]
        if self.session is None:
            raise RuntimeError("the delivery worker has no HTTP session")
        if item.purged and item.document is not None:
            # Its user was purged while the turn ran: their data is not sent anywhere.
            documents.discard(item, self.ctx.data_dir)
            await forget_reply(self.ctx.store, item.id, self.clock)
            return
        try:
            if item.document is None:
                await platform.send(self.session, item.reply_to, item.text)
            else:
                await documents.send(
                    platform, self.session, item, self.ctx.data_dir, self.ctx.store.db.sealer
                )
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
            documents.discard(item, self.ctx.data_dir)
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
            documents.discard(item, self.ctx.data_dir)
            self.ctx.stats.delivery_failures += 1
            return
        delay = self.backoff.delay(attempts, retry_after)
        log.info("%s reply %d: %s; retry in %.1fs", item.platform, item.id, reason, delay)
        await self.ctx.store.mark_retry(item.id, reason, self.clock() + delay)
        self.ctx.stats.delivery_retries += 1
