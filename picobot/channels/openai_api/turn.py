"""One turn's events rendered as an OpenAI answer: a ``chat.completion`` or an SSE stream.

Every kind of event becomes assistant text, as a chat shows it: the streamed tokens of a
reply, a command's notice, a purge's confirmation question (the next request's ``y``
answers it), and errors a user caused (a wrong command, an unknown session). Failures
of PicoBot or the model are errors in OpenAI's shape instead: an HTTP status when
nothing was sent yet, else an error event in the stream. The kernel's stream is always
read to its end, also when the client has left, because the kernel stores the reply
only then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from picobot.channels.openai_api.wire import (
    DONE,
    chunk,
    completion,
    error_body,
    stream_error,
)
from picobot.messages import Outbound, OutboundKind

log = logging.getLogger("picobot.channels.openai_api.server")

SESSION_HEADER = "X-PicoBot-Session"
SHOWN_CODES = frozenset({"user", "command", "confirm", "session_deleted"})
"""Error codes of what the user did (a bad command, say): shown as the assistant's text."""
STATUS_OF = {
    "empty": 400,
    "bad_text": 400,
    "denied": 404,  # a session header naming a session that is not the caller's
    "llm_error": 502,
    "store_unavailable": 503,
}
FAILED = "PicoBot failed to answer; please try again."
CODE_OF = {"denied": "session_not_found", "llm_error": "model_error"}


class TurnRenderer:
    """Render one turn's events for one request (streamed or whole)."""

    def __init__(
        self,
        request: web.Request,
        completion_id: str,
        created: int,
        model: str,
        *,
        include_usage: bool = False,
    ) -> None:
        self._request = request
        self._id = completion_id
        self._created = created
        self._model = model
        self._include_usage = include_usage
        self._session: str | None = None
        self._response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                # A proxy (nginx) must pass each chunk on as it comes, not buffer the answer.
                "X-Accel-Buffering": "no",
            }
        )
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._pump: asyncio.Task[None] | None = None  # writes the queue once streaming

    # --- whole --------------------------------------------------------------------

    async def whole(self, events: AsyncIterator[Outbound]) -> web.StreamResponse:
        """Collect the turn into one ``chat.completion`` (or an error answer)."""
        parts: list[str] = []
        tokens: list[str] = []
        failure: Outbound | None = None
        async for event in events:
            self._note_session(event)
            if event.kind is OutboundKind.TOKEN:
                tokens.append(event.text)
            elif event.kind is OutboundKind.DONE:
                parts.append(event.text)
                tokens.clear()
            elif event.kind in (OutboundKind.NOTICE, OutboundKind.CONFIRM_REQUEST):
                parts.append(event.text)
            elif event.kind is OutboundKind.ERROR:
                if event.code in SHOWN_CODES:
                    parts.append(event.text)
                elif failure is None:
                    failure = event
        if failure is not None:
            return self._error_response(failure)
        content = "\n\n".join(p for p in [*parts, "".join(tokens)] if p)
        return web.json_response(
            completion(self._id, self._created, self._model, content), headers=self._headers()
        )

    # --- streamed -----------------------------------------------------------------

    async def stream(self, events: AsyncIterator[Outbound]) -> web.StreamResponse:
        """Stream the turn as SSE chunks ending in ``data: [DONE]``.

        The response begins with the first event that is not ``session``, so that its
        headers name the session, and so that a turn failing at once is an HTTP error.
        Chunks are queued and written by a pump task, as the WebSocket channel does: a
        turn that awaited each write gave the event loop to other turns in its middle,
        which lengthened it under load.
        """
        try:
            refusal = await self._relay(events)
        except Exception:
            if self._pump is None:
                raise  # answered 500 in OpenAI's shape by the server's middleware
            log.exception("chat endpoint: a streamed turn failed")
            return await self._end(stream_error(500, FAILED, "internal"))
        if refusal is not None:
            return refusal
        # The end in one write: the finish chunk, the usage chunk if asked, [DONE].
        tail = chunk(self._id, self._created, self._model, finish=True)
        if self._include_usage:
            tail += chunk(self._id, self._created, self._model, usage=True)
        return await self._end(tail)

    async def _relay(self, events: AsyncIterator[Outbound]) -> web.Response | None:
        """Queue the turn's events as chunks; an error answer if it failed at once."""
        streamed = False  # text was sent: the next text starts a new paragraph
        async for event in events:
            self._note_session(event)
            kind = event.kind
            if kind is OutboundKind.SESSION:
                continue
            if kind is OutboundKind.ERROR and event.code not in SHOWN_CODES:
                if self._pump is None:
                    return self._error_response(event)
                status, code = _status(event)
                self._send(stream_error(status, event.text, code))
                continue
            if kind is OutboundKind.DONE:
                continue  # its text was streamed as tokens
            text = event.text
            if kind is not OutboundKind.TOKEN and streamed:
                text = "\n\n" + text
            self._send(chunk(self._id, self._created, self._model, content=text))
            streamed = streamed or bool(text)
        return None

    async def cut_off(self, message: str) -> web.StreamResponse:
        """The turn was cancelled (shutdown): end the stream with an error, or answer 503."""
        if self._pump is None:
            return web.Response(
                status=503,
                text=error_body(503, message, "shutting_down"),
                content_type="application/json",
            )
        return await self._end(stream_error(503, message, "shutting_down"))

    def _send(self, data: str) -> None:
        """Queue ``data`` for the client; the first call starts the response."""
        if self._pump is None:
            # The role chunk goes out with the first content: one write less.
            data = chunk(self._id, self._created, self._model, content="", role=True) + data
            self._pump = asyncio.create_task(self._write_queued(), name="openai-stream")
        self._queue.put_nowait(data)

    async def _end(self, tail: str) -> web.StreamResponse:
        """Queue ``tail`` and ``[DONE]``, wait until all is written (or the client left)."""
        self._send(tail + DONE)
        self._queue.put_nowait(None)
        assert self._pump is not None
        # Shielded: a shutdown cancelling the handler now must not cut the last write.
        await asyncio.shield(self._pump)
        return self._response

    async def _write_queued(self) -> None:
        response = self._response
        try:
            await response.prepare(self._request)
            while (data := await self._queue.get()) is not None:
                parts = [data]
                while not self._queue.empty():  # what came meanwhile, in one write
                    more = self._queue.get_nowait()
                    if more is None:
                        self._queue.put_nowait(None)
                        break
                    parts.append(more)
                await response.write("".join(parts).encode("utf-8"))
        except (ConnectionError, RuntimeError):
            # The client left: the turn goes on unseen, so its reply is still stored.
            log.info("chat endpoint: the client left before the answer was complete")

    # --- helpers ------------------------------------------------------------------

    def _note_session(self, event: Outbound) -> None:
        if self._session is None and event.session_id is not None:
            self._session = event.session_id
            if self._pump is None:  # headers not sent yet
                self._response.headers[SESSION_HEADER] = event.session_id

    def _headers(self) -> dict[str, str]:
        return {SESSION_HEADER: self._session} if self._session is not None else {}

    def _error_response(self, event: Outbound) -> web.Response:
        status, code = _status(event)
        return web.Response(
            status=status,
            text=error_body(status, event.text, code),
            content_type="application/json",
            headers=self._headers(),
        )


def _status(event: Outbound) -> tuple[int, str]:
    code = event.code or "internal"
    return STATUS_OF.get(code, 500), CODE_OF.get(code, code)
