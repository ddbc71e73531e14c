"""The background workers of the webhook core: turns here, deliveries in :mod:`.delivery`.

:class:`InboxWorker` runs the turns of accepted messages: one at a time per chat (so
answers keep the order of questions), several chats at once. The replies of a turn
are enqueued in the same transaction that marks its message done.

A DOCUMENT event (``/export``) is queued as a reply that names its file, or replaced
by a text when the platform cannot take it (:mod:`picobot.channels.webhook.documents`).

Messages and replies of a platform that is not enabled are left in their queues, out of
the way of the others, with one warning from each worker at start.

Both sleep on an :class:`asyncio.Event`; neither polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from picobot.channels.webhook import documents
from picobot.channels.webhook.base import Platform
from picobot.channels.webhook.claims import POLL_SECS, kept
from picobot.channels.webhook.common import split_text
from picobot.errors import StoreUnavailable
from picobot.kernel.kernel import Kernel
from picobot.messages import Identity, Inbound, OutboundKind
from picobot.store.channels.webhooks import InboxItem, QueuedDocument, WebhookStore

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
Reply = str | QueuedDocument
"""One reply to queue: a text, or a document (an export file) with its caption."""


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

    @property
    def data_dir(self) -> Path:
        """The data directory: where the export files that replies hand over live."""
        return self.store.db.path.parent


class Worker:
    """What both workers have: the wake-up, the in-flight set and the store-failure
    retry timer."""

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


class InboxWorker(Worker):
    """Runs the turns of pending inbox messages."""

    def __init__(self, ctx: WorkerContext, kernel: Kernel) -> None:
        super().__init__(ctx)
        self.kernel = kernel
        self.on_enqueued: Callable[[], None] = lambda: None
        self._chats: dict[tuple[str, str], deque[InboxItem]] = {}

    async def run(self) -> None:
        """Dispatch pending messages whenever woken, and every :data:`POLL_SECS` for
        those other instances left; the first pass resumes old work."""
        while True:
            self.wake_event.clear()
            if self.stopping:
                return  # work in flight finishes in its own tasks
            await self._dispatch()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake_event.wait(), POLL_SECS)

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
        # Claimed in the writer: a stale read of the dispatcher can never run a turn twice,
        # nor can another instance run it, nor a later message of the chat overtake it.
        attempt = await self.ctx.store.start_processing(item.id)
        if attempt is None:
            return
        session_id: str | None = None
        replies: Sequence[Reply]
        if attempt > MAX_TURN_ATTEMPTS:
            log.error("webhook message %d given up after %d attempts", item.id, attempt - 1)
            replies, failed = [SORRY], True
        else:
            async with kept(self.ctx.store, "webhook_inbox", item.id):
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
    ) -> tuple[list[Reply], bool, str | None]:
        """The replies (texts, documents) to send back for one message, whether the turn
        failed, and the session it ran in (the last one its events named), which the
        replies belong to."""
        identity = Identity(platform.name, item.user_id, item.chat_id)
        inbound = Inbound(identity, item.text, message_id=item.message_id)
        replies: list[Reply] = []
        session_id: str | None = None
        try:
            async for event in self.kernel.handle(inbound):
                session_id = event.session_id or session_id
                if event.kind is OutboundKind.DOCUMENT:
                    replies.append(documents.queued(platform, event, self.ctx.data_dir))
                elif event.kind in REPLY_KINDS and event.text:
                    replies.append(event.text)
        except Exception:
            # The kernel handles its own failures, so this is a bug; never send str(exc).
            log.exception("webhook turn failed for message %d", item.id)
            return [*replies, SORRY], True, session_id
        return replies, False, session_id


def as_messages(replies: Sequence[Reply], limit: int | None) -> list[Reply]:
    """The replies as the platform's messages: each text cut to ``limit`` (None: kept
    whole); a document stays one (the platform shortens its caption)."""
    if limit is None:
        return list(replies)
    return [
        part
        for reply in replies
        for part in ([reply] if isinstance(reply, QueuedDocument) else split_text(reply, limit))
    ]
