"""A stand-in for Slack's Socket Mode and Web API, on real aiohttp and websockets servers.

As documented at docs.slack.dev (Socket Mode): ``POST /apps.connections.open`` with the
app-level token answers ``{"ok": true, "url": "<ws url with a one-time ticket>"}``
(``{"ok": false, "error": "invalid_auth"}`` for a wrong token); the WebSocket then
gets ``hello``, ``events_api`` envelopes (``envelope_id``, ``payload`` = the Events
API's ``event_callback`` body) that the app acknowledges with ``{"envelope_id"}``, and
``disconnect`` when Slack wants a new connection. ``chat.postMessage`` records replies.

File uploads as documented for ``files.getUploadURLExternal`` (form or JSON fields
``filename`` and ``length``; answers ``upload_url`` and ``file_id``), the upload URL
(the bytes POSTed raw or as multipart; answers 200 ``OK - <length>``; it needs no
token) and ``files.completeUploadExternal`` (``files: [{id, title}]``, ``channel_id``,
``initial_comment``, ``thread_ts``; a file whose bytes differ from its ``length`` is
refused): :attr:`SlackSocketAPI.shared` records what was shared.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from websockets.asyncio.server import ServerConnection, serve

from tests.channels.webhook.stand_in import StandIn, Upload, read_form, serving

APP_ID = "A0PICOBOT1"


class SlackSocketAPI(StandIn):
    """One app's Socket Mode endpoint and Web API."""

    def __init__(self, app_token: str, bot_token: str) -> None:
        super().__init__()
        self.app_token = app_token
        self.bot_token = bot_token
        self.base_url = ""
        self.ws_base = ""
        self.opens = 0
        self.hellos = 0
        self.posted: list[dict[str, Any]] = []
        self.acks: list[str] = []
        self.sockets: list[ServerConnection] = []
        self.envelopes: dict[str, dict[str, Any]] = {}
        """Every events_api envelope sent, by id."""
        self._tickets: set[str] = set()
        self._ids = itertools.count(1)
        self.uploads: dict[str, dict[str, Any]] = {}
        """Files by id: ``filename``, ``length`` and, once uploaded, ``content``."""
        self.upload_auth: list[str | None] = []
        """The Authorization header of each upload (Slack needs none)."""
        self.shared: list[dict[str, Any]] = []
        """Each files.completeUploadExternal call that shared files, with their bytes."""
        self.failing_uploads: deque[int] = deque()
        """Statuses the next files.getUploadURLExternal calls fail with."""
        self.on_connect: str | None = None
        """What a broken Slack does right after every ``hello``: ``"disconnect"`` (asks
        to reconnect) or ``"drop"`` (closes the connection); None: nothing."""

    @property
    def live(self) -> ServerConnection:
        """The newest open connection."""
        return self.sockets[-1]

    async def send_event(
        self,
        text: str,
        *,
        user: str = "U0ALICE",
        team: str = "T0TEAM",
        channel: str = "D0CHAT",
        app: str = APP_ID,
        **event: Any,
    ) -> str:
        """Send an events_api envelope with a message event; its envelope id."""
        n = next(self._ids)
        payload = {
            "token": "unused-verification-token",
            "team_id": team,
            "api_app_id": app,
            "event": {
                "type": "message",
                "channel": channel,
                "user": user,
                "text": text,
                "ts": f"{time.time():.6f}",
                "channel_type": "im",
                **event,
            },
            "type": "event_callback",
            "event_id": f"Ev{n:08d}",
            "event_time": int(time.time()),
        }
        envelope_id = f"env-{n}"
        self.envelopes[envelope_id] = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": 0,
            "retry_reason": "",
        }
        await self.live.send(json.dumps(self.envelopes[envelope_id]))
        return envelope_id

    async def redeliver(self, envelope_id: str) -> None:
        """Send an unacknowledged envelope again, as Slack retries one."""
        envelope = self.envelopes[envelope_id]
        envelope["retry_attempt"] += 1
        envelope["retry_reason"] = "timeout"
        await self.live.send(json.dumps(envelope))

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the app to reconnect, as Slack does before it rotates a connection."""
        await self.live.send(
            json.dumps({"type": "disconnect", "reason": reason, "debug_info": {"host": "wss-1"}})
        )

    async def http(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["tail"]
        auth = request.headers.get("Authorization", "")
        if method == "apps.connections.open":
            if auth != f"Bearer {self.app_token}":
                return web.json_response({"ok": False, "error": "invalid_auth"})
            self.opens += 1
            ticket = f"ticket-{self.opens}"
            self._tickets.add(ticket)
            self.notify()
            return web.json_response({"ok": True, "url": f"{self.ws_base}/link/?ticket={ticket}"})
        if method == "chat.postMessage":
            if auth != f"Bearer {self.bot_token}":
                return web.json_response({"ok": False, "error": "invalid_auth"})
            self.posted.append(await request.json())
            self.notify()
            return web.json_response({"ok": True, "channel": "D0CHAT", "ts": "1.000001"})
        if method.startswith("upload/"):
            return await self._upload(request, method.removeprefix("upload/"))
        if method in ("files.getUploadURLExternal", "files.completeUploadExternal"):
            if auth != f"Bearer {self.bot_token}":
                return web.json_response({"ok": False, "error": "invalid_auth"})
            if method == "files.completeUploadExternal":
                return self._complete(await request.json())
            if self.failing_uploads:
                status = self.failing_uploads.popleft()
                return web.json_response({"ok": False, "error": "internal_error"}, status=status)
            fields = await request.json() if request.content_type == "application/json" else {}
            if not fields:
                fields, _ = await read_form(request)
            return self._upload_url(fields)
        return web.json_response({"ok": False, "error": "unknown_method"}, status=404)

    def _upload_url(self, fields: dict[str, Any]) -> web.Response:
        length = str(fields.get("length", ""))
        if not fields.get("filename") or not length.isdigit() or int(length) == 0:
            return web.json_response({"ok": False, "error": "missing_argument"})
        file_id = f"F{next(self._ids):09d}"
        self.uploads[file_id] = {"filename": fields["filename"], "length": int(length)}
        url = f"{self.base_url}/upload/{file_id}"
        return web.json_response({"ok": True, "upload_url": url, "file_id": file_id})

    async def _upload(self, request: web.Request, file_id: str) -> web.Response:
        if file_id not in self.uploads:
            return web.Response(status=404, text="not found")
        self.upload_auth.append(request.headers.get("Authorization"))
        if request.content_type == "multipart/form-data":
            _, files = await read_form(request)
            content = next(iter(files.values())).content
        else:
            content = await request.read()
        self.uploads[file_id]["content"] = content
        self.notify()
        return web.Response(text=f"OK - {len(content)}")

    def _complete(self, args: dict[str, Any]) -> web.Response:
        files = args.get("files")
        if not isinstance(files, list) or not files:
            return web.json_response({"ok": False, "error": "invalid_arguments"})
        shared = []
        for entry in files:
            known = self.uploads.get(str(entry.get("id")))
            if known is None or len(known.get("content", b"")) != known["length"]:
                return web.json_response({"ok": False, "error": "file_not_found"})
            upload = Upload(known["filename"], "", known["content"])
            shared.append({"id": entry["id"], "title": entry.get("title"), "upload": upload})
        self.shared.append({**args, "files": shared})
        self.notify()
        return web.json_response(
            {"ok": True, "files": [{"id": f["id"], "title": f["title"]} for f in shared]}
        )

    async def socket(self, ws: ServerConnection) -> None:
        ticket = ws.request.path.partition("ticket=")[2] if ws.request else ""
        if ticket not in self._tickets:
            await ws.close(4001, "invalid ticket")
            return
        self._tickets.discard(ticket)  # one use only
        self.sockets.append(ws)
        await ws.send(
            json.dumps(
                {
                    "type": "hello",
                    "num_connections": 1,
                    "debug_info": {"host": "wss-1", "approximate_connection_time": 18060},
                    "connection_info": {"app_id": APP_ID},
                }
            )
        )
        self.hellos += 1
        self.notify()
        if self.on_connect == "disconnect":
            await self.disconnect()
        elif self.on_connect == "drop":
            await ws.close()
            return
        async for raw in ws:
            ack = json.loads(raw)
            self.acks.append(str(ack.get("envelope_id")))
            self.notify()


@asynccontextmanager
async def slack_socket_api(app_token: str, bot_token: str) -> AsyncIterator[SlackSocketAPI]:
    """A :class:`SlackSocketAPI` on 127.0.0.1 (any free ports)."""
    api = SlackSocketAPI(app_token, bot_token)
    async with serving(api.http) as base_url, serve(api.socket, "127.0.0.1", 0) as ws_server:
        api.base_url = base_url
        port = next(iter(ws_server.sockets)).getsockname()[1]
        api.ws_base = f"ws://127.0.0.1:{port}"
        yield api
