"""The terminal UI attached to a remote PicoBot over its WebSocket channel.

:class:`RemoteBackend` implements :class:`ChatBackend` with the WebSocket protocol of
:mod:`picobot.channels.websocket.protocol`: the widgets cannot tell it from the local kernel.
Each call sends one message with a fresh ``id`` and reads the frames answering it up to
their ``end``; calls run one at a time, as the TUI's job queue already does. A lost
connection is reported as an error event and re-opened on the next call; since the
server keys the conversation on the API key, the session simply continues.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import ExitStack, aclosing, contextmanager
from types import TracebackType

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.protocol import State
from websockets.uri import parse_uri

from picobot.channels.tui.app import run_chat
from picobot.channels.tui.backend import HistoryLines
from picobot.channels.websocket.frames import ClientChat, ClientConfirm, ClientHistory
from picobot.channels.websocket.protocol import (
    ClientMessage,
    ProtocolError,
    ServerFrame,
    encode_client_message,
    parse_server_frame,
)
from picobot.config.settings import Settings
from picobot.config.sources import read_secret
from picobot.errors import UserError
from picobot.logsetup import logging_to
from picobot.messages import Outbound, OutboundKind, error

log = logging.getLogger(__name__)

CONNECTION_LOST = "Lost the connection to the PicoBot server; the next message reconnects."


class RemoteUnavailable(UserError):
    """The server cannot be reached or refused us; ``status`` is the HTTP status if any."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RemoteBackend:
    """A :class:`ChatBackend` talking to ``picobot serve`` at ``url`` with ``api_key``."""

    def __init__(self, url: str, api_key: str, *, open_timeout: float = 10.0) -> None:
        self.url = url
        self._api_key = api_key
        self._open_timeout = open_timeout
        self._ws: ClientConnection | None = None
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self._user_id = ""
        self._model_name = ""
        self._max_bytes: int | None = None

    @property
    def user_id(self) -> str:
        """The identity the server gave our key, e.g. ``ws:alice`` (from ``hello``)."""
        return self._user_id

    @property
    def model_name(self) -> str:
        """The server's model (from ``hello``)."""
        return self._model_name

    async def connect(self) -> None:
        """Open the connection and read ``hello``; raise RemoteUnavailable on failure."""
        await self.aclose()
        try:
            # Checked first: a bad port or bracket raises ValueError from deep in urllib.
            parse_uri(self.url)
        except (InvalidURI, ValueError):
            raise RemoteUnavailable(f"not a valid WebSocket URL: {self.url}") from None
        try:
            async with asyncio.timeout(self._open_timeout):
                ws = await connect(
                    self.url,
                    additional_headers={"Authorization": f"Bearer {self._api_key}"},
                    open_timeout=None,  # the surrounding timeout also covers hello
                    max_size=None,  # the server is trusted; replies may be long
                )
                try:
                    hello = parse_server_frame(await ws.recv())
                except (ConnectionClosed, ProtocolError):
                    await ws.close()
                    hello = ServerFrame("none")
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status == 401:
                raise RemoteUnavailable(f"{self.url} refused the API key", status) from None
            raise RemoteUnavailable(f"{self.url} refused the connection", status) from None
        except TimeoutError:
            raise RemoteUnavailable(f"timed out connecting to {self.url}") from None
        except OSError as exc:
            raise RemoteUnavailable(f"cannot reach {self.url}: {self._reason(exc)}") from None
        except InvalidHandshake:
            raise RemoteUnavailable(f"the WebSocket handshake with {self.url} failed") from None
        if hello.type != "hello":
            await ws.close()
            raise RemoteUnavailable(f"{self.url} did not greet as a PicoBot server")
        self._ws = ws
        self._user_id = hello.user_id
        self._model_name = hello.model
        self._max_bytes = hello.max_message_bytes
        log.info("connected to %s as %s", self.url, self._user_id)

    def _reason(self, exc: OSError) -> str:
        """Why connecting failed, never empty: a reset has neither strerror nor text."""
        reason = exc.strerror or str(exc) or type(exc).__name__
        if self.url.startswith("wss:") and isinstance(exc, ConnectionResetError | ssl.SSLError):
            reason += " (is the server serving TLS? a plain server needs ws://)"
        return reason

    async def aclose(self) -> None:
        """Close the connection (idempotent)."""
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close()

    async def __aenter__(self) -> RemoteBackend:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def send(self, text: str) -> AsyncIterator[Outbound]:
        """Send one message (or slash command); yield the turn's events."""
        message = ClientChat(text=text, id=self._next_id())
        if self._max_bytes is not None:
            size = len(encode_client_message(message).encode("utf-8"))
            if size > self._max_bytes:
                yield error(
                    f"Message too long for the server (limit {self._max_bytes} bytes).", "too_large"
                )
                return
        async for event in self._events(message):
            yield event

    async def confirm(self, token: str, answer: str) -> AsyncIterator[Outbound]:
        """Answer a confirmation request by its token; yield the resulting events."""
        async for event in self._events(
            ClientConfirm(token=token, answer=answer, id=self._next_id())
        ):
            yield event

    async def history(self, limit: int) -> tuple[str | None, HistoryLines]:
        """The current session id and its last ``limit`` (role, content) pairs."""
        try:
            # aclosing: returning from inside the loop must release the lock at once.
            async with aclosing(
                self._exchange(ClientHistory(limit=limit, id=self._next_id()))
            ) as frames:
                async for frame in frames:
                    if frame.type == "history":
                        return frame.session_id, list(frame.history)
                    if frame.event is not None and frame.event.kind is OutboundKind.ERROR:
                        raise UserError(frame.event.text)
        except ConnectionClosed:
            raise UserError(CONNECTION_LOST) from None
        raise UserError("The server sent no history.")

    def _next_id(self) -> str:
        return str(next(self._ids))

    async def _events(self, message: ClientMessage) -> AsyncIterator[Outbound]:
        try:
            async with aclosing(self._exchange(message)) as frames:
                async for frame in frames:
                    if frame.event is not None:
                        yield frame.event
        except ConnectionClosed:
            log.warning("connection to %s lost", self.url)
            yield error(CONNECTION_LOST, "disconnected")

    async def _exchange(self, message: ClientMessage) -> AsyncGenerator[ServerFrame, None]:
        """Send ``message``; yield the frames answering it, up to (not including) ``end``."""
        async with self._lock:
            if self._ws is None or self._ws.state is not State.OPEN:
                await self.connect()
            ws = self._ws
            assert ws is not None
            await ws.send(encode_client_message(message))
            while True:
                try:
                    frame = parse_server_frame(await ws.recv())
                except ProtocolError as exc:
                    log.warning("unreadable frame from %s: %s", self.url, exc.message)
                    continue
                if frame.reply_to is None and frame.type == "error":
                    # The server could not parse our frame: nothing else will answer it.
                    yield frame
                    return
                if frame.reply_to != message.id:
                    continue  # left over from an exchange that was abandoned
                if frame.type == "end":
                    return
                yield frame


@contextmanager
def _quiet_logging() -> Iterator[None]:
    # Without any handler, logging's last resort writes warnings over the UI's screen.
    handler = logging.NullHandler()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


async def run_remote_app(url: str, api_key: str, key_env: str) -> int:
    """Connect and run the chat UI; print one line and return 1 if the server is unusable."""
    backend = RemoteBackend(url, api_key)
    try:
        await backend.connect()
    except RemoteUnavailable as exc:
        if exc.status == 401:
            print(f"picobot tui: {url} refused the API key in {key_env}", file=sys.stderr)
        else:
            print(f"picobot tui: {exc}", file=sys.stderr)
        return 1
    try:
        await run_chat(backend)
    finally:
        await backend.aclose()
    return 0


def run_remote_tui(url: str, key_env: str, *, settings: Settings | None = None) -> int:
    """Run the chat UI against a remote ``picobot serve``; return the exit code.

    The API key comes from the env var ``key_env`` (never from the command line, where
    it would show in the process list): missing -> one line, exit 2. An unreachable or
    refusing server -> one line, exit 1. With ``settings``, logs go to the TUI's log
    file (``[logging] file`` or ``<data dir>/picobot.log``) with secrets redacted.
    """
    api_key = read_secret(key_env)
    if not api_key:
        print(f"picobot tui: set {key_env} to your WebSocket API key", file=sys.stderr)
        return 2
    with ExitStack() as stack:
        if settings is None:
            stack.enter_context(_quiet_logging())
        else:
            # Imported here: the package's __init__ may import this module.
            from picobot.channels.tui import log_file_path

            path = log_file_path(settings)
            try:
                stack.enter_context(logging_to(path, settings))
            except OSError as exc:
                print(
                    f"picobot tui: cannot write the log file {path}: {exc.strerror}",
                    file=sys.stderr,
                )
                return 1
        return asyncio.run(run_remote_app(url, api_key, key_env))
    raise AssertionError("unreachable")  # pragma: no cover - ExitStack does not swallow
