"""One WebSocket client connection: a receive loop, an in-order worker, a bounded send queue.

The handler task reads frames and answers ``ping`` at once; chat, confirm and history
requests go to a worker that runs them one at a time, in order; a pump writes events
from a bounded queue. A client that reads too slowly overflows that queue and is
disconnected, but the turn in flight still runs to its end, so its reply is stored.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed, ConnectionClosedError
from websockets.frames import CloseCode
from websockets.protocol import State

from picobot.channels.websocket.frames import (
    ClientChat,
    ClientConfirm,
    ClientHistory,
    ClientPing,
    ClientSubscribe,
)
from picobot.channels.websocket.protocol import (
    ClientMessage,
    ProtocolError,
    encode_end,
    encode_error,
    encode_event,
    encode_hello,
    encode_history,
    encode_pong,
    encode_stored_event,
    encode_subscribed,
    parse_client_message,
)
from picobot.config.channels import WebSocketSettings
from picobot.errors import StoreUnavailable
from picobot.kernel.event_feed import FEED_BATCH, SessionEventFeed
from picobot.kernel.kernel import COMMAND_FAILED, Kernel
from picobot.messages import Identity, Inbound, Outbound
from picobot.ratelimit import TokenBucket
from picobot.store.conversation.events import Event

# The channel's logger, not this module's: operators filter the channel by one name.
log = logging.getLogger("picobot.channels.websocket.server")

RATE_BURST = 10
RATE_LIMITED = "Too many messages; this one was dropped. Please slow down."
SHUTTING_DOWN = "The server is shutting down; this message was not processed."
CUT_OFF = "The server shut down before this message was answered."
# How long a close handshake may take before the TCP connection is dropped: a client
# that stopped reading would otherwise hold a closing connection open forever.
CLOSE_TIMEOUT_SECS = 2.0
YIELD_AT_QUEUED = 8
"""Frames queued for the client after which a reply stream gives the sender a turn."""
EVENT_POLL_SECS = 1.0
"""How often a subscribed connection looks for new events of its session (two reads)."""


class Connection:
    """One client: a receive loop, an in-order worker and a bounded send queue."""

    def __init__(
        self,
        ws: ServerConnection,
        identity: Identity,
        name: str,
        *,
        kernel: Kernel,
        settings: WebSocketSettings,
        bucket: TokenBucket,
        accepting: bool = True,
    ) -> None:
        """``bucket`` is the rate limit of the identity, shared by all its connections."""
        self.ws = ws
        self.identity = identity
        self.name = name
        self._kernel = kernel
        self._settings = settings
        self._bucket = bucket
        self._outbox: asyncio.Queue[str] = asyncio.Queue(settings.send_queue_size)
        # Well below the queue's bound, so a fast stream never overflows it by itself.
        self._yield_at = max(1, min(YIELD_AT_QUEUED, settings.send_queue_size // 2))
        self._inbox: deque[ClientMessage] = deque()
        self._wake = asyncio.Event()
        self._accepting = accepting
        self._dropping = False  # the client is too slow: events are discarded
        # Created here, not in run(), so that stop() can always wait on them.
        self._worker = asyncio.create_task(self._work(), name=f"ws-{name}-worker")
        self._pump_task = asyncio.create_task(self._pump(), name=f"ws-{name}-pump")
        self._tasks: list[asyncio.Task[None]] = [self._worker, self._pump_task]
        self._follower: asyncio.Task[None] | None = None  # while subscribed to events

    async def run(self) -> None:
        """Serve the connection until it closes; the turn in flight is finished first."""
        self.emit(
            encode_hello(
                self.identity.user_id,
                self._kernel.provider.model_name,
                self._settings.max_message_bytes,
            )
        )
        try:
            async for frame in self.ws:
                self._receive(frame)
        except ConnectionClosedError:
            pass  # the peer vanished or broke the protocol; the close line logs the code
        finally:
            self.close_inbox(refuse=False)
            try:
                await asyncio.wait([self._worker])
            finally:
                self.cancel_work()
                await asyncio.wait(self._tasks)

    def emit(self, frame: str) -> None:
        """Queue one frame; a full queue means a slow client, which is disconnected."""
        if self._dropping or self.ws.state is not State.OPEN:
            return
        try:
            self._outbox.put_nowait(frame)
        except asyncio.QueueFull:
            self._dropping = True
            log.warning(
                "WebSocket %s for %s: send queue full (%d events); closing the slow connection",
                self.name,
                self.identity.user_id,
                self._outbox.maxsize,
            )
            self._tasks.append(asyncio.create_task(self._close_slow()))

    def close_inbox(self, *, refuse: bool) -> None:
        """Take no more requests; queued ones are refused (stop) or dropped (client gone)."""
        self._accepting = False
        dropped = list(self._inbox)
        self._inbox.clear()
        for message in dropped:
            if refuse:
                self._refuse(message.id, "shutting_down", SHUTTING_DOWN)
        if dropped and not refuse:
            log.info(
                "WebSocket %s: client left, %d queued requests dropped", self.name, len(dropped)
            )
        self._wake.set()

    async def settle(self) -> None:
        """Wait until the worker is done and its events are written (or cannot be)."""
        await asyncio.wait([self._worker])
        flushed = asyncio.create_task(self._outbox.join())
        try:
            await asyncio.wait([flushed, self._pump_task], return_when=asyncio.FIRST_COMPLETED)
        finally:
            flushed.cancel()

    def cancel_turn(self) -> None:
        """Cut off the request in flight (after the grace period); it is still answered."""
        self._worker.cancel()

    def cancel_work(self) -> None:
        """Cancel the worker and the pump (on the way out)."""
        for task in self._tasks:
            task.cancel()

    def _receive(self, frame: str | bytes) -> None:
        try:
            message = parse_client_message(frame, self._settings.max_message_bytes)
        except ProtocolError as exc:
            self.emit(encode_error(exc.code, exc.message))
            return
        subscribe = isinstance(message, ClientSubscribe)  # answered without an `end`
        if isinstance(message, ClientPing):
            self.emit(encode_pong(message.id))
        elif not self._accepting:
            self._refuse(message.id, "shutting_down", SHUTTING_DOWN, end=not subscribe)
        elif not self._bucket.take():
            self._refuse(message.id, "rate_limited", RATE_LIMITED, end=not subscribe)
        elif isinstance(message, ClientSubscribe):
            self._subscribe(message.events)
            self.emit(encode_subscribed(message.events, message.id))
        else:
            if isinstance(message, ClientConfirm):
                # An answer jumps the queue: the kernel would take a queued chat message
                # of this user as the answer to the pending confirmation.
                self._inbox.appendleft(message)
            else:
                self._inbox.append(message)
            self._wake.set()

    def _subscribe(self, events: bool) -> None:
        """Start or stop following the events of this identity's current session; a
        subscribe that changes nothing does nothing (a follower ends before it is gone
        from ``_tasks``, so toggling costs no memory)."""
        if events and self._follower is None:
            follower = asyncio.create_task(self._follow(), name=f"ws-{self.name}-events")
            self._tasks.append(follower)
            follower.add_done_callback(self._followed)
            self._follower = follower
        elif not events and self._follower is not None:
            self._follower.cancel()
            self._follower = None

    def _followed(self, follower: asyncio.Task[None]) -> None:
        """A follower ended: forget it, and log why if it failed (it only ends cancelled)."""
        self._tasks.remove(follower)
        if not follower.cancelled() and follower.exception() is not None:
            log.error(
                "WebSocket %s: following events stopped",
                self.name,
                exc_info=follower.exception(),
            )
        if self._follower is follower:
            self._follower = None

    async def _follow(self) -> None:
        """Emit each new event of the current session (whichever it is at each read).

        A failed read is logged (once until reads work again) and retried at the next poll.
        """
        feed = SessionEventFeed(self._kernel.db)
        after: int | None = None
        failing = False
        while True:
            events: list[Event] = []
            try:
                if after is None:
                    after = await feed.start()
                events = await feed.after(self.identity, after)
                failing = False
            except StoreUnavailable:
                log.warning("WebSocket %s: events unavailable for now", self.name)
            except Exception:
                if not failing:
                    log.exception("WebSocket %s: reading events failed; retrying", self.name)
                failing = True
            for event in events:
                assert event.session_id is not None  # the feed reads one session's
                self.emit(
                    encode_stored_event(
                        event.id, event.type, event.at, event.session_id, event.payload
                    )
                )
                after = event.id
            if len(events) < FEED_BATCH:
                await asyncio.sleep(EVENT_POLL_SECS)

    def _refuse(self, reply_to: str | None, code: str, text: str, *, end: bool = True) -> None:
        self.emit(encode_error(code, text, reply_to))
        if end:
            self.emit(encode_end(reply_to))

    async def _work(self) -> None:
        while True:
            if not self._inbox:
                if not self._accepting:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._serve(self._inbox.popleft())

    async def _serve(self, message: ClientMessage) -> None:
        reply_to = message.id
        try:
            if isinstance(message, ClientChat):
                inbound = Inbound(self.identity, message.text, session_id=message.session_id)
                await self._relay(self._kernel.handle(inbound), reply_to)
            elif isinstance(message, ClientConfirm):
                events = self._kernel.confirm(self.identity, message.token, message.answer)
                await self._relay(events, reply_to)
            elif isinstance(message, ClientHistory):
                recent = await self._kernel.recent_history(self.identity, message.limit)
                pairs = [(m.role, m.content) for m in recent.messages]
                self.emit(encode_history(recent.session_id, pairs, reply_to))
        except asyncio.CancelledError:
            # Cut off by stop(): the client still learns this request's fate, and its
            # end. A `session` event before it said that the message was stored.
            self._refuse(reply_to, "shutting_down", CUT_OFF)
            raise
        except Exception:
            log.exception("WebSocket %s: request failed for %s", self.name, self.identity.user_id)
            # Not INTERNAL_FAILED: what failed here (a history read, say) saved nothing.
            self.emit(encode_error("internal", COMMAND_FAILED, reply_to))
        self.emit(encode_end(reply_to))

    async def _relay(self, events: AsyncIterator[Outbound], reply_to: str | None) -> None:
        # Consumed to the end even when nobody reads any more: the kernel stores the
        # reply only once the stream is exhausted.
        async for event in events:
            self.emit(encode_event(event, reply_to))
            if self._outbox.qsize() >= self._yield_at:
                # Let the pump write before the next event: a model that streams without
                # awaiting anything would otherwise fill the queue of even a fast reader.
                # (Yielding after every event cost a loop iteration per frame.)
                await asyncio.sleep(0)

    async def _pump(self) -> None:
        while True:
            frame = await self._outbox.get()
            try:
                await self.ws.send(frame)
            except ConnectionClosed:
                return
            finally:
                self._outbox.task_done()

    async def _close_slow(self) -> None:
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_SECS):
                await self.ws.close(CloseCode.POLICY_VIOLATION, "send queue overflow")
        except TimeoutError:
            # A client that stopped reading never sees the close frame; drop the TCP link.
            self.ws.transport.abort()
