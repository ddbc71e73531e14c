"""The event log over HTTP: a filtered, paged listing and a live Server-Sent Events stream.

``GET /api/v1/events`` pages through stored events by id. ``GET /api/v1/events/stream``
sends each new matching event as one SSE message (``id:`` the event id, ``event:`` its
type, ``data:`` the JSON of :class:`~picobot.admin.event_models.Event`) and resumes
after the ``Last-Event-ID`` a reconnecting client sends (or ``?after=``); without
either it starts with the events stored after it connected. It polls the store every
``poll_secs`` for events after the last one sent, so events written by another
process (a CLI purge) arrive as well, and sends a comment line every
``heartbeat_secs`` of silence so proxies and clients see a live connection.

At most ``max_streams`` streams are open at once (more get 503 ``too_many_streams``),
and at most ``per_key`` of them with one key (more get 429 ``too_many_key_streams``), so
one key cannot take every slot. A write the client has not taken within
``write_timeout_secs`` (it stopped reading, and the socket's buffers are full) ends the
stream and drops the connection, so a client that never reads gives its slot back.
:meth:`EventRoutes.close` (on application shutdown) ends every open stream, so a
server shutdown never waits on a client that keeps listening.

SSE framing is a few lines here rather than the aiohttp-sse package: what it adds
(ping, framing) is about as long as this, and the poll loop and shutdown are ours anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from aiohttp import web

from picobot.admin import event_models as em
from picobot.admin.http import ApiError, StreamAborted, json_response, read_query
from picobot.numbers import parse_digits
from picobot.privacy.scopes import Actor
from picobot.services.events import EventService
from picobot.store.conversation.events import Event

log = logging.getLogger(__name__)

STREAM_BATCH = 200
"""Most events one poll of a stream reads (it reads again at once when it got that many)."""


def sse_message(event: Event) -> bytes:
    """One SSE message: id, event type and the event's JSON on one ``data:`` line."""
    data = em.Event.model_validate(event).model_dump_json()
    return f"id: {event.id}\nevent: {event.type}\ndata: {data}\n\n".encode()


class _Stalled(Exception):
    """The client took no data within the write deadline."""


def _last_event_id(request: web.Request) -> int | None:
    raw = request.headers.get("Last-Event-ID")
    if raw is None or not raw.strip():
        return None
    last = parse_digits(raw.strip())
    if last is None:
        raise ApiError(400, "invalid_header", "Last-Event-ID must be an event id (a number).")
    return last


class EventRoutes:
    """Handlers for the event routes; each takes the request and the operator actor."""

    def __init__(
        self,
        events: EventService,
        *,
        max_streams: int = 8,
        per_key: int = 4,
        write_timeout_secs: float = 30.0,
        poll_secs: float = 0.5,
        heartbeat_secs: float = 15.0,
    ) -> None:
        self._events = events
        self._max_streams = max_streams
        self._per_key = per_key
        self._write_timeout = write_timeout_secs
        self._poll = poll_secs
        self._heartbeat = heartbeat_secs
        self._streams = 0
        self._by_key: dict[str, int] = {}
        self._closing = asyncio.Event()

    @property
    def open_streams(self) -> int:
        """How many streams are being served now."""
        return self._streams

    def close(self) -> None:
        """End every open stream (each finishes its current write) and refuse new ones."""
        self._closing.set()

    async def list_events(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``GET /api/v1/events``: a page of events, oldest first, and the next cursor."""
        query = read_query(request, em.EventsQuery)
        where = query.filter()
        found = await self._events.list(where, query.limit + 1)
        page = found[: query.limit]
        more = len(found) > query.limit
        return json_response(
            em.EventList(
                events=[em.Event.model_validate(e) for e in page],
                next_after=page[-1].id if more else None,
            )
        )

    async def stream(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``GET /api/v1/events/stream``: new events as Server-Sent Events."""
        query = read_query(request, em.EventsStreamQuery)
        resume = _last_event_id(request)
        if self._closing.is_set():
            raise ApiError(503, "shutting_down", "The server is shutting down.")
        held = self._by_key.get(actor.id, 0)
        if held >= self._per_key:
            raise ApiError(
                429,
                "too_many_key_streams",
                f"This key already has {held} event streams open (at most {self._per_key});"
                " close one first.",
            )
        if self._streams >= self._max_streams:
            raise ApiError(
                503, "too_many_streams", f"At most {self._max_streams} event streams are open."
            )
        self._streams += 1
        self._by_key[actor.id] = held + 1
        try:
            after = resume if resume is not None else query.after
            if after is None:
                after = await self._events.latest_id()
            response = web.StreamResponse(
                headers={
                    "Content-Type": "text/event-stream",
                    "Cache-Control": "no-cache",
                    "X-Accel-Buffering": "no",  # nginx: pass each message on at once
                }
            )
            await response.prepare(request)
            log.info("admin %s opened an event stream after %d", actor.id, after)
            try:
                await self._follow(request, response, query, after)
            except _Stalled:
                log.info(
                    "admin %s: the event stream's client took no data for %gs; closed",
                    actor.id,
                    self._write_timeout,
                )
                # Dropped, not ended: what is buffered for it would never be read.
                if request.transport is not None:
                    request.transport.abort()
                return response
            except (ConnectionResetError, asyncio.CancelledError) as exc:
                if isinstance(exc, asyncio.CancelledError):
                    raise
                log.info("admin %s: the event stream's client went away", actor.id)
                raise StreamAborted("event stream: client went away") from exc
            except Exception as exc:
                log.exception("admin %s: the event stream failed", actor.id)
                raise StreamAborted("event stream failed") from exc
            try:
                await asyncio.wait_for(response.write_eof(), self._write_timeout)
            except ConnectionResetError:
                pass
            except TimeoutError:
                if request.transport is not None:
                    request.transport.abort()
            return response
        finally:
            self._streams -= 1
            self._by_key[actor.id] -= 1
            if not self._by_key[actor.id]:
                del self._by_key[actor.id]

    async def _send(self, response: web.StreamResponse, data: bytes) -> None:
        """Write ``data``; :class:`_Stalled` when the client has not taken it in time."""
        try:
            await asyncio.wait_for(response.write(data), self._write_timeout)
        except TimeoutError:
            raise _Stalled from None

    async def _follow(
        self,
        request: web.Request,
        response: web.StreamResponse,
        query: em.EventsStreamQuery,
        after: int,
    ) -> None:
        """Send the events after ``after`` as they are stored, until shutdown or until
        the client is gone."""
        await self._send(response, b": stream open\n\n")
        quiet_since = time.monotonic()
        while not self._closing.is_set():
            transport = request.transport
            if transport is None or transport.is_closing():
                return
            events = await self._events.list(query.filter(after), STREAM_BATCH)
            if events:
                await self._send(response, b"".join(sse_message(e) for e in events))
                after = events[-1].id
                quiet_since = time.monotonic()
                if len(events) == STREAM_BATCH:
                    continue  # more are waiting: no pause
            elif time.monotonic() - quiet_since >= self._heartbeat:
                await self._send(response, b": heartbeat\n\n")
                quiet_since = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), self._poll)
