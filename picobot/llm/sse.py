"""A small, sans-I/O parser of ``text/event-stream`` (Server-Sent Events).

Both HTTP providers stream their replies as SSE. The parser is fed raw bytes exactly
as the network delivers them, so a chunk boundary may fall anywhere: inside a line,
between ``\\r`` and ``\\n``, or in the middle of a multi-byte UTF-8 character.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncGenerator, AsyncIterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event: its type (``message`` when unnamed) and its data."""

    event: str
    data: str


class SSEParser:
    """Incremental SSE parser following the WHATWG event-stream rules we need.

    Handles ``event:`` and ``data:`` fields (several data lines join with ``\\n``),
    comments (lines starting with ``:``), and ``\\n``, ``\\r\\n`` or ``\\r`` line ends.
    Other fields (``id:``, ``retry:``) are ignored: the providers never reconnect.

    One non-standard field is understood: llama.cpp's ``llama-server`` reports a failure
    after the 200 as an ``error: {json}`` line (then ``data: [DONE]``). Ignoring it, as
    the standard says, would turn the failure into an empty answer, so it is read as
    ``event: error`` with that line as the data.
    """

    def __init__(self) -> None:
        # An incremental decoder keeps a split multi-byte character for the next chunk;
        # "utf-8-sig" drops a leading byte order mark, as the standard asks.
        self._decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        self._buf = ""
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume bytes; return the events completed by them."""
        self._buf += self._decoder.decode(chunk)
        return self._drain(final=False)

    def close(self) -> list[SSEEvent]:
        """Flush at end of stream; a last event lacking its blank line is still dispatched.

        Servers that omit the final blank line exist; an unfinished *line* is dropped,
        because it may be a truncated JSON payload.
        """
        self._buf += self._decoder.decode(b"", final=True)
        events = self._drain(final=True)
        self._buf = ""
        if self._data:
            events.append(self._dispatch())
        return events

    def _drain(self, *, final: bool) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        buf = self._buf
        pos = 0
        while True:
            nl = buf.find("\n", pos)
            cr = buf.find("\r", pos)
            if nl < 0 and cr < 0:
                break
            if cr < 0 or (0 <= nl < cr):
                line, pos = buf[pos:nl], nl + 1
            elif cr + 1 < len(buf):
                line = buf[pos:cr]
                pos = cr + 2 if buf[cr + 1] == "\n" else cr + 1
            elif final:
                line, pos = buf[pos:cr], cr + 1
            else:
                # A trailing "\r" may be the first half of "\r\n": wait for more bytes.
                break
            event = self._line(line)
            if event is not None:
                events.append(event)
        self._buf = buf[pos:]
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            if self._data:
                return self._dispatch()
            self._reset()
            return None
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "error":
            self._event = "error"
            self._data.append(value)
        return None

    def _dispatch(self) -> SSEEvent:
        event = SSEEvent(self._event or "message", "\n".join(self._data))
        self._reset()
        return event

    def _reset(self) -> None:
        self._event = ""
        self._data = []


async def iter_sse(chunks: AsyncIterable[bytes]) -> AsyncGenerator[SSEEvent, None]:
    """Parse an async stream of byte chunks (e.g. ``response.content.iter_any()``)."""
    parser = SSEParser()
    async for chunk in chunks:
        for event in parser.feed(chunk):
            yield event
    for event in parser.close():
        yield event
