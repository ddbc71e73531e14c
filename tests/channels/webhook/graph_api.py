"""A stand-in for the WhatsApp Cloud API's messages and media, on a real aiohttp server.

As documented at developers.facebook.com (Cloud API): ``POST /<version>/<phone number
id>/media`` takes multipart/form-data with ``messaging_product=whatsapp``, ``type``
(the MIME type) and the ``file`` part, and answers ``{"id": "<media id>"}``; ``POST
/<version>/<phone number id>/messages`` takes JSON (``type: "text"`` with
``text.body``, or ``type: "document"`` with ``document: {id, filename, caption}``)
and answers ``{"messaging_product", "contacts", "messages": [{"id"}]}``. Errors are
``{"error": {"message", "type", "code"}}``; a wrong access token gets 401 (code 190),
a document naming an unknown media id 400.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from tests.channels.webhook.stand_in import StandIn, Upload, read_form, serving

VERSION = "v21.0"


class GraphAPI(StandIn):
    """The Cloud API of one business phone number."""

    def __init__(self, access_token: str, number: str) -> None:
        super().__init__()
        self.access_token = access_token
        self.number = number
        self.base_url = ""
        self.media: dict[str, Upload] = {}
        """Every uploaded file by media id."""
        self.messages: list[dict[str, Any]] = []
        """Every message sent, as posted."""
        self.failing_uploads: deque[int] = deque()
        """Statuses the next media uploads fail with."""
        self._ids = itertools.count(4_490_000_000)

    @property
    def graph_url(self) -> str:
        """What ``graph_base_url`` is set to."""
        return f"{self.base_url}/{VERSION}"

    def documents(self) -> list[tuple[dict[str, Any], Upload]]:
        """Each document message sent, with the file its media id names."""
        return [
            (m["document"], self.media[m["document"]["id"]])
            for m in self.messages
            if m.get("type") == "document"
        ]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {self.access_token}":
            return _error(401, "Invalid OAuth access token.", 190)
        version, number, edge = [*request.match_info["tail"].split("/"), "", "", ""][:3]
        if version != VERSION or number != self.number:
            return _error(404, "Unknown path components", 2500)
        if edge == "media":
            return await self._media(request)
        if edge == "messages":
            return self._message(await request.json())
        return _error(404, "Unknown path components", 2500)

    async def _media(self, request: web.Request) -> web.Response:
        if self.failing_uploads:
            return _error(self.failing_uploads.popleft(), "An unexpected error occurred.", 2)
        fields, files = await read_form(request)
        upload = files.get("file")
        if (
            fields.get("messaging_product") != "whatsapp"
            or upload is None
            or not fields.get("type")
        ):
            return _error(400, "(#100) The parameter messaging_product is required.", 100)
        media_id = str(next(self._ids))
        self.media[media_id] = upload
        self.notify()
        return web.json_response({"id": media_id})

    def _message(self, body: dict[str, Any]) -> web.Response:
        if body.get("type") == "document" and body.get("document", {}).get("id") not in self.media:
            return _error(400, "(#131053) Media upload error", 131053)
        self.messages.append(body)
        self.notify()
        n = next(self._ids)
        return web.json_response(
            {
                "messaging_product": "whatsapp",
                "contacts": [{"input": body.get("to"), "wa_id": body.get("to")}],
                "messages": [{"id": f"wamid.{n}"}],
            }
        )


def _error(status: int, message: str, code: int) -> web.Response:
    error = {"message": message, "type": "OAuthException", "code": code}
    return web.json_response({"error": error}, status=status)


@asynccontextmanager
async def graph_api(access_token: str, number: str) -> AsyncIterator[GraphAPI]:
    """A :class:`GraphAPI` on 127.0.0.1, any free port."""
    api = GraphAPI(access_token, number)
    async with serving(api.handle) as base_url:
        api.base_url = base_url
        yield api
