"""What the platform stand-ins share: waiting for their state, serving their handler,
reading the files of an upload."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Self

from aiohttp import web
from aiohttp.test_utils import TestServer


class StandIn:
    """A stand-in whose tests wait for its state to change (the caller bounds the wait)."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()

    async def wait(self, predicate: Callable[[Self], bool]) -> None:
        """Wait until ``predicate(self)`` holds."""
        while not predicate(self):
            changed = self._changed
            await changed.wait()

    def notify(self) -> None:
        """Wake every waiter to check its predicate again."""
        self._changed.set()
        self._changed = asyncio.Event()


@asynccontextmanager
async def serving(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> AsyncIterator[str]:
    """``handler`` for every method and path on 127.0.0.1, any free port; its base URL
    (the path is in ``request.match_info["tail"]``)."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


@dataclass(frozen=True)
class Upload:
    """A file part of a multipart/form-data request, as a stand-in received it."""

    filename: str
    content_type: str
    content: bytes


async def read_form(request: web.Request) -> tuple[dict[str, str], dict[str, Upload]]:
    """The fields and the files of a multipart/form-data (or urlencoded) request."""
    fields: dict[str, str] = {}
    files: dict[str, Upload] = {}
    for key, value in (await request.post()).items():
        if isinstance(value, web.FileField):
            files[key] = Upload(value.filename, value.content_type, value.file.read())
        else:
            fields[key] = str(value)
    return fields, files
