"""Raw TCP clients for the servers' connection caps and deadlines, shared by the tests.

They can come from any loopback address (Linux routes all of 127.0.0.0/8 to the
loopback interface), so a test tells an attacking peer from a legitimate one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

SAFETY = 30.0  # seconds; only a net against hangs, never what a test measures

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def open_from(peer: str, port: int) -> Stream:
    """A connection to 127.0.0.1:``port`` from the loopback address ``peer``."""
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(peer, 0))


async def read_until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (or resets it)."""
    data = b""
    try:
        async with asyncio.timeout(SAFETY):
            while chunk := await reader.read(4096):
                data += chunk
    except ConnectionError:
        pass
    return data


async def status_of(reader: asyncio.StreamReader) -> int | None:
    """The status of the response on ``reader``; None when closed without one."""
    try:
        async with asyncio.timeout(SAFETY):
            line = await reader.readline()
    except ConnectionError:
        return None
    return int(line.split()[1]) if line else None


@contextlib.asynccontextmanager
async def trickling(
    writer: asyncio.StreamWriter, piece: Callable[[int], bytes]
) -> AsyncIterator[None]:
    """Write ``piece(n)`` every tenth of a second while inside (300 pieces at most)."""

    async def trickle() -> None:
        for n in range(300):  # bounded: stops by itself
            writer.write(piece(n))
            await asyncio.sleep(0.1)

    task = asyncio.create_task(trickle())
    try:
        yield
    finally:
        task.cancel()
        writer.close()
