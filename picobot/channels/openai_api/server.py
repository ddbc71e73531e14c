"""PicoBot as an OpenAI-compatible chat endpoint: ``POST /v1/chat/completions``, ``GET /v1/models``.

Chat front ends that speak the OpenAI API (Open WebUI, LibreChat, editors) talk to the
kernel through this channel. It takes the WebSocket channel's API keys
(``Authorization: Bearer <key>``, as OpenAI clients send it, or ``X-API-Key``), and a
key is the same user here as over WebSocket (``ws:<key prefix>`` or ``ws:<identity>``):
one person's memories, facts, recall, exports and purges are the same whichever of the
two they use. The channel is ``openai`` and the chat is the user, so this endpoint has
its own current session per key (a WebSocket client's conversation is not interleaved
with it) and answers a pending purge with the key's next message, as messaging
channels do.

Only the last message of a request is read, and it must be the user's: it becomes one
turn through :meth:`Kernel.handle`, exactly like a chat message of any channel. The
rest of the client's history is ignored; see :mod:`.wire` and docs/integrations.md.
An ``X-PicoBot-Session`` request header selects one of the caller's sessions; every
answer names the session in the same header.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from picobot.auth import MIN_KEY_LENGTH, KeyRing, only, presented_key
from picobot.channels.http_guard import Handler, HttpGuard, HttpLimits
from picobot.channels.openai_api.turn import FAILED, SESSION_HEADER, TurnRenderer
from picobot.channels.openai_api.wire import (
    WireError,
    error_body,
    models,
    parse_chat_request,
)
from picobot.channels.websocket.protocol import parse_api_keys
from picobot.config.channels import OpenAISettings
from picobot.config.sections import host_port
from picobot.config.sources import read_secret
from picobot.errors import ConfigError, PicobotError
from picobot.kernel.kernel import Kernel
from picobot.logsafe import LogSummary, loggable
from picobot.messages import Identity, Inbound
from picobot.ratelimit import TokenBucket, peer_key

log = logging.getLogger(__name__)

CHANNEL = "openai"
"""The ``Identity.channel`` of this endpoint's turns."""
RATE_BURST = 10
SHUTTING_DOWN = "The server is shutting down; this request was not processed."


def error_response(
    status: int,
    message: str,
    code: str | None,
    *,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    """An answer in OpenAI's error shape."""
    return web.Response(
        status=status,
        text=error_body(status, message, code, param),
        content_type="application/json",
        headers=headers,
    )


class OpenAIChannel:
    """Serve the kernel as an OpenAI-compatible endpoint; ``start``/``stop``."""

    def __init__(
        self,
        kernel: Kernel,
        settings: OpenAISettings,
        limits: HttpLimits,
        *,
        keys_env: str,
        keys: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        protect: Callable[[web.Application], None] | None = None,
    ) -> None:
        """``keys`` maps API key -> user id; by default the WebSocket keys in ``keys_env``.
        ``protect`` is applied to the application before it serves (``serve`` passes
        the security headers every answer of its HTTP servers carries).

        Raises ConfigError (naming the env var, never a key) for a short or malformed key,
        or when there is no key at all.
        """
        if keys is None:
            keys = parse_api_keys(read_secret(keys_env), keys_env)
        elif any(len(k) < MIN_KEY_LENGTH for k in keys):
            raise ConfigError(f"API keys must be at least {MIN_KEY_LENGTH} characters")
        if not keys:
            raise ConfigError(
                f"{keys_env} holds no API keys; every client of the chat endpoint would be refused"
            )
        self.kernel = kernel
        self.settings = settings
        self.clock = clock
        self._keys = KeyRing(keys.items())
        self._limits = limits
        self._guard: HttpGuard | None = None
        self._port: int | None = None  # kept after stop, for the logs
        self._runner: web.AppRunner | None = None
        self._buckets: dict[str, TokenBucket] = {}
        self._in_flight: set[asyncio.Task[Any]] = set()
        self._refusals = LogSummary(log, "chat endpoint: refused requests", level=logging.INFO)
        self._created = int(time.time())
        self._protect = protect
        self.stopping = False

    @property
    def port(self) -> int:
        """The bound port (useful with port 0); only after :meth:`start`."""
        if self._port is None:
            raise RuntimeError("the chat endpoint is not started")
        return self._port

    @property
    def url(self) -> str:
        """The base URL OpenAI clients are given."""
        return f"http://{host_port(self.settings.host, self.port)}/v1"

    def app(self) -> web.Application:
        """The aiohttp application (routes and error middleware), without the guard."""
        middlewares = [self._guard.middleware] if self._guard is not None else []
        app = web.Application(
            client_max_size=self.settings.max_body_bytes,
            middlewares=[*middlewares, _openai_errors],
        )
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        return app

    async def start(self) -> None:
        """Bind and start accepting requests."""
        if self._runner is not None:
            raise RuntimeError("the chat endpoint is already started")
        self._guard = HttpGuard(self._limits, "chat endpoint")
        app = self.app()
        if self._protect is not None:
            self._protect(app)
        runner = web.AppRunner(
            app, access_log=None, keepalive_timeout=self._limits.keepalive_timeout
        )
        await runner.setup()
        self._runner = runner
        s = self.settings
        try:
            await self._guard.listen(runner, s.host, s.port)
        except OSError as exc:
            await runner.cleanup()
            self._runner = None
            address = host_port(s.host, s.port)
            raise PicobotError(
                f"the chat endpoint cannot listen on {address}: {exc.strerror or exc}"
            ) from None
        self._port = self._guard.port
        log.info("OpenAI-compatible chat endpoint listening on %s", self.url)

    async def stop(self, grace_secs: float) -> None:
        """Refuse new requests (503), let requests in flight finish up to ``grace_secs``.

        A turn still running then is cancelled; a streamed answer gets an error event.
        """
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self.stopping = True
        if self._guard is not None:
            self._guard.close()
        if self._in_flight:
            _, pending = await asyncio.wait(set(self._in_flight), timeout=grace_secs)
            if pending:
                log.warning("chat endpoint: %d turns outlived the grace period", len(pending))
                for task in pending:
                    task.cancel()
                await asyncio.wait(pending)
        await runner.cleanup()
        self._refusals.close()
        log.info("OpenAI-compatible chat endpoint stopped")

    # --- requests ---------------------------------------------------------------------

    def authenticate(self, request: web.Request) -> str | None:
        """The user id of the key the request presents, or None."""
        headers = request.headers
        presented = presented_key(
            only(headers.getall("Authorization", [])), only(headers.getall("X-API-Key", []))
        )
        return self._keys.lookup(presented)

    def _admit(self, request: web.Request) -> str | web.Response:
        """The caller's user id, or the refusal (shutting down, bad key, rate limited)."""
        if self.stopping:
            return error_response(503, SHUTTING_DOWN, "shutting_down")
        user_id = self.authenticate(request)
        if user_id is None:
            peer = request.remote or "?"
            self._refusals.note(
                peer_key(peer),
                "chat endpoint refused %s (%s): missing or invalid API key",
                loggable(peer),
                loggable(request.headers.get("User-Agent", "no user agent")),
            )
            return error_response(
                401,
                "Missing or invalid API key.",
                "invalid_api_key",
                headers={"WWW-Authenticate": 'Bearer realm="picobot"'},
            )
        bucket = self._buckets.get(user_id)
        if bucket is None:
            bucket = TokenBucket(self.settings.rate_limit_per_minute, RATE_BURST, self.clock)
            self._buckets[user_id] = bucket
        if not bucket.take():
            wait = max(1, int(bucket.wait_secs() + 0.999))
            return error_response(
                429,
                "Too many requests for this key; slow down.",
                "rate_limit_exceeded",
                headers={"Retry-After": str(wait)},
            )
        return user_id

    async def _models(self, request: web.Request) -> web.StreamResponse:
        admitted = self._admit(request)
        if isinstance(admitted, web.Response):
            return admitted
        return web.json_response(models(self.settings.model_name, self._created))

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        admitted = self._admit(request)
        if isinstance(admitted, web.Response):
            return admitted
        user_id = admitted
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return error_response(
                413,
                f"The request body is larger than {self.settings.max_body_bytes} bytes.",
                "request_too_large",
            )
        try:
            chat = parse_chat_request(body, self.settings.max_message_bytes)
        except WireError as exc:
            return error_response(exc.status, exc.message, exc.code, param=exc.param)
        session = request.headers.get(SESSION_HEADER, "").strip() or None
        identity = Identity(CHANNEL, user_id, user_id)
        inbound = Inbound(identity, chat.text, session_id=session)
        renderer = TurnRenderer(
            request,
            f"chatcmpl-{secrets.token_hex(12)}",
            int(time.time()),
            self.settings.model_name,
            include_usage=chat.include_usage,
        )
        task = asyncio.current_task()
        assert task is not None
        self._in_flight.add(task)
        try:
            if chat.stream:
                return await renderer.stream(self.kernel.handle(inbound))
            return await renderer.whole(self.kernel.handle(inbound))
        except asyncio.CancelledError:
            if self.stopping:
                return await renderer.cut_off(SHUTTING_DOWN)
            raise
        finally:
            self._in_flight.discard(task)


@web.middleware
async def _openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own refusals (404, 405, ...) and failures in OpenAI's error shape."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.status == 408:
            raise
        return error_response(exc.status, exc.reason, None)
    except Exception:
        # Logged with its traceback; the client gets a generic line, never str(exc).
        log.exception("chat endpoint: a request failed")
        return error_response(500, FAILED, "internal")
