"""A stand-in for the Telegram Bot API's long polling, on a real aiohttp server.

As documented at core.telegram.org/bots/api: methods at ``/bot<token>/<method>``
with parameters in the query string, a JSON body or multipart/form-data (a file
upload); answers ``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code",
"description"[, "parameters"]}``.
``getUpdates`` holds the request until an update is there or ``timeout`` seconds
passed, confirms (forgets) every update below ``offset``, answers 409 Conflict while a
webhook is set; ``getWebhookInfo``/``setWebhook``/``deleteWebhook`` manage that
webhook; ``sendMessage`` records the reply, ``sendDocument`` the document uploaded as
the ``document`` part (with ``chat_id`` and ``caption``). A wrong token gets 401
Unauthorized.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from tests.channels.webhook.stand_in import StandIn, Upload, read_form, serving

CONFLICT = (
    "Conflict: can't use getUpdates method while webhook is active;"
    " use deleteWebhook to delete the webhook first"
)


class TelegramAPI(StandIn):
    """The Bot API of one bot: pending updates, a webhook setting, sent messages."""

    def __init__(self, token: str, *, first_update_id: int = 500_000) -> None:
        super().__init__()
        self.token = token
        self.pending: list[dict[str, Any]] = []
        """Updates not confirmed yet, in id order."""
        self.next_id = first_update_id
        self.webhook_url = ""
        self.sent: list[dict[str, Any]] = []
        self.documents: list[tuple[dict[str, str], Upload]] = []
        """Every document taken by sendDocument: its fields and the file."""
        self.failing_sends: deque[int] = deque()
        """Statuses the next sendMessage or sendDocument calls fail with."""
        self.calls: list[tuple[str, dict[str, Any]]] = []
        """Every method call with its parameters, in order."""
        self.served: list[int] = []
        """Every update id getUpdates answered with (a repeat shows up twice)."""
        self.plan: deque[tuple[int, dict[str, Any] | bytes]] = deque()
        """Planned (status, body) answers of the next getUpdates calls (a body of bytes
        is sent as it is)."""
        self.after_serving: Callable[[list[int]], None] | None = None
        """Called with the ids of each non-empty getUpdates answer, once it is written."""
        self.base_url = ""
        self.instant = False
        """Answer getUpdates at once, without holding it for its timeout (a broken Bot
        API, or one in front of a proxy that does not wait)."""

    def push(self, text: str, *, user: int, chat: int, message_id: int, **extra: Any) -> int:
        """Queue a text message update as Telegram would send it; its update_id."""
        message: dict[str, Any] = {
            "message_id": message_id,
            "from": {"id": user, "is_bot": False, "first_name": "Ann"},
            "chat": {"id": chat, "type": "private", "first_name": "Ann"},
            "date": int(time.time()),
            "text": text,
            **extra,
        }
        return self.push_update({"message": message})

    def push_update(self, update: dict[str, Any]) -> int:
        """Queue any update body; its update_id."""
        self.next_id += 1
        self.pending.append({"update_id": self.next_id, **update})
        self.notify()
        return self.next_id

    def polls(self) -> list[dict[str, Any]]:
        """The parameters of every getUpdates call so far."""
        return [params for method, params in self.calls if method == "getUpdates"]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        token, _, method = request.match_info["tail"].partition("/")
        if token != f"bot{self.token}":
            return _error(401, "Unauthorized")
        params: dict[str, Any] = dict(request.query)
        files: dict[str, Upload] = {}
        if request.content_type == "multipart/form-data":
            fields, files = await read_form(request)
            params.update(fields)
        elif request.can_read_body:
            params.update(await request.json())
        self.calls.append((method, params))
        self.notify()
        if method == "getUpdates":
            return await self._get_updates(params)
        if method == "getWebhookInfo":
            info = {"url": self.webhook_url, "has_custom_certificate": False}
            return _ok(info | {"pending_update_count": len(self.pending)})
        if method == "setWebhook":
            self.webhook_url = str(params.get("url", ""))
            return _ok(True, description="Webhook was set")
        if method == "deleteWebhook":
            was = self.webhook_url
            self.webhook_url = ""
            if params.get("drop_pending_updates") in (True, "true"):
                self.pending.clear()
            said = "Webhook was deleted" if was else "Webhook is already deleted"
            return _ok(True, description=said)
        if method in ("sendMessage", "sendDocument") and self.failing_sends:
            status = self.failing_sends.popleft()
            return _error(status, "Internal Server Error" if status >= 500 else "Bad Request")
        if method == "sendDocument":
            upload = files.get("document")
            if upload is None or "chat_id" not in params:
                return _error(400, "Bad Request: there is no document in the request")
            self.documents.append((params, upload))
            self.notify()
            file = {"file_name": upload.filename, "file_size": len(upload.content)}
            return _ok({"message_id": len(self.documents), "document": file})
        if method == "sendMessage":
            self.sent.append(params)
            self.notify()
            return _ok({"message_id": len(self.sent), "chat": {"id": params.get("chat_id")}})
        return _error(404, "Not Found: method not found")

    async def _get_updates(self, params: dict[str, Any]) -> web.StreamResponse:
        if self.webhook_url:
            return _error(409, CONFLICT)
        if self.plan:
            status, body = self.plan.popleft()
            if isinstance(body, bytes):  # as it is, e.g. a number too long to encode
                return web.Response(body=body, status=status, content_type="application/json")
            return web.json_response(body, status=status)
        offset = params.get("offset")
        if offset is not None:
            self.pending = [u for u in self.pending if not _confirmed(u, int(offset))]
        limit = int(params.get("limit", 100))
        try:
            async with asyncio.timeout(0 if self.instant else float(params.get("timeout", 0))):
                await self.wait(lambda api: bool(api.pending))
        except TimeoutError:
            pass
        batch = self.pending[:limit]
        ids = [u["update_id"] for u in batch]
        self.served += ids
        response = _ok(batch)
        if ids and self.after_serving is not None:
            hook = self.after_serving
            asyncio.get_running_loop().call_soon(hook, ids)
        return response

    def too_many_requests(self, retry_after: int) -> None:
        """Answer the next getUpdates with 429 and ``parameters.retry_after``."""
        self.plan.append(
            (
                429,
                {
                    "ok": False,
                    "error_code": 429,
                    "description": f"Too Many Requests: retry after {retry_after}",
                    "parameters": {"retry_after": retry_after},
                },
            )
        )


def _confirmed(update: dict[str, Any], offset: int) -> bool:
    """Whether ``offset`` confirms ``update`` (an id that is no number never is)."""
    number = update.get("update_id")
    return isinstance(number, int) and number < offset


def _ok(result: Any, description: str | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": True, "result": result}
    if description:
        body["description"] = description
    return web.json_response(body)


def _error(code: int, description: str) -> web.Response:
    return web.json_response(
        {"ok": False, "error_code": code, "description": description}, status=code
    )


@asynccontextmanager
async def telegram_api(token: str, **kwargs: Any) -> AsyncIterator[TelegramAPI]:
    """A :class:`TelegramAPI` on 127.0.0.1, any free port."""
    api = TelegramAPI(token, **kwargs)
    async with serving(api.handle) as base_url:
        api.base_url = base_url
        yield api
