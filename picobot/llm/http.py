"""HTTP plumbing shared by the remote providers: session, timeouts, retries, errors.

Every failure leaves this module as :class:`picobot.errors.LLMError`; aiohttp's own
exceptions never escape. Error messages carry the HTTP status and a short excerpt of
the server's explanation with any secret scrubbed, never request headers.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import logging
import re
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import aclosing, contextmanager
from ipaddress import ip_address
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp

from picobot.backoff import parse_retry_after
from picobot.config.settings import LLMSettings
from picobot.errors import UNREADABLE_JSON, LLMError
from picobot.llm.retry import RETRY_STATUSES, RetryPolicy
from picobot.llm.sse import SSEEvent, iter_sse

log = logging.getLogger(__name__)

T = TypeVar("T")
SSEDecoder = Callable[[AsyncIterator[SSEEvent]], AsyncGenerator[T, None]]

_DETAIL_BYTES = 2048
_DETAIL_CHARS = 200
_SNIFF_BYTES = 16
# How an event stream begins: blank lines, then a field ("data:", ...) or a comment (":").
_SSE_START = re.compile(rb"\s*(?:data|event|id|retry|error)?:")


class RetryableError(LLMError):
    """A failure worth another attempt: HTTP 429/5xx, a dropped connection, a cut stream."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


async def _prepend(head: bytes, chunks: AsyncIterable[bytes]) -> AsyncGenerator[bytes, None]:
    if head:
        yield head
    async for chunk in chunks:
        yield chunk


_UNEXPECTED_SHAPE = (AttributeError, KeyError, IndexError, TypeError)
"""What reading a reply of the wrong shape raises (``choices`` an object, a string
``delta``): the decoders check what servers really send, not every shape JSON allows."""


@contextmanager
def _reply_shape(name: str) -> Iterator[None]:
    """Turn an error raised while reading a reply of an unexpected shape into LLMError.

    So that the user is told the model failed (and the log says why), not that
    PicoBot hit an internal error.
    """
    try:
        yield
    except _UNEXPECTED_SHAPE as exc:
        raise LLMError(
            f"{name}: the server's reply does not have the expected shape ({type(exc).__name__})"
        ) from exc


def error_text(raw: str | bytes) -> str:
    """The explanation in an error body: its JSON ``message`` when it has one, else the text.

    Understands OpenAI's ``{"error": {"message"}}``, Anthropic's ``{"type": "error",
    "error": {...}}`` and llama.cpp's bare ``{"code", "message"}``.
    """
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    try:
        data = json.loads(text)
    except UNREADABLE_JSON:
        return text
    if not isinstance(data, dict):
        return text
    err = data.get("error", data)
    return str(err.get("message", err) if isinstance(err, dict) else err)


def is_local_url(url: str) -> bool:
    """True for loopback hosts (localhost, 127.0.0.0/8, ::1), where keys are optional."""
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


def url_host(url: str) -> str:
    """The lower-cased host name of a URL ('' when there is none)."""
    return (urlsplit(url).hostname or "").lower()


class HTTPTransport:
    """POSTs JSON to one provider with timeouts and retries; owns or borrows a session.

    ``secrets`` (API keys) are scrubbed from every error message before it is raised.
    """

    def __init__(
        self,
        name: str,
        *,
        timeout_secs: float,
        policy: RetryPolicy,
        session: aiohttp.ClientSession | None = None,
        secrets: Sequence[str] = (),
    ) -> None:
        self._name = name
        self._timeout = timeout_secs
        self._policy = policy
        self._session = session
        # A borrowed session belongs to the caller, who closes it.
        self._owns_session = session is None
        self._secrets = tuple(s for s in secrets if s)

    @classmethod
    def for_provider(
        cls,
        name: str,
        settings: LLMSettings,
        *,
        api_key: str | None,
        session: aiohttp.ClientSession | None,
        backoff_base: float,
        max_backoff: float,
    ) -> HTTPTransport:
        """The transport a provider builds from ``[llm]``: timeout, retries, key scrubbing."""
        return cls(
            name,
            timeout_secs=settings.timeout_secs,
            policy=RetryPolicy(settings.max_retries, backoff_base, max_backoff),
            session=session,
            secrets=[api_key] if api_key else [],
        )

    async def aclose(self) -> None:
        """Close the session if this transport created it."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _get_session(self) -> aiohttp.ClientSession:
        # Created lazily: a ClientSession must be born inside the running event loop.
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
            self._owns_session = True
        return self._session

    async def post_json(
        self, url: str, headers: Mapping[str, str], body: Any, parse: Callable[[Any], T]
    ) -> T:
        """POST and return what ``parse`` makes of the JSON reply, retrying transient
        failures; a reply ``parse`` cannot read (of the wrong shape) is an LLMError."""
        # A whole answer has one deadline; nothing reaches the user before it is done.
        timeout = aiohttp.ClientTimeout(total=self._timeout)
        attempt = 0
        while True:
            try:
                data = await self._post_json_once(url, headers, body, timeout)
            except RetryableError as exc:
                attempt = await self._backoff_or_raise(exc, attempt)
                continue
            with _reply_shape(self._name):
                return parse(data)

    async def get_json(self, url: str, headers: Mapping[str, str]) -> Any:
        """GET once and return the decoded JSON reply (used for light discovery calls)."""
        timeout = aiohttp.ClientTimeout(total=self._timeout)
        with self._mapped_errors():
            async with self._get_session().get(url, headers=headers, timeout=timeout) as resp:
                await self._check_status(resp)
                return self._decode_json(await resp.read())

    async def stream_sse(
        self,
        url: str,
        headers: Mapping[str, str],
        body: Any,
        decode: SSEDecoder[T],
    ) -> AsyncIterator[T]:
        """POST and yield what ``decode`` makes of the SSE reply.

        Transient failures are retried only while nothing has been yielded: once the
        caller has shown part of a reply, a retry would duplicate or contradict it.
        """
        # No total deadline: a long answer may stream for minutes. The timeout bounds
        # connecting and each silence between bytes, which is what a stall looks like.
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self._timeout, sock_read=self._timeout
        )
        attempt = 0
        while True:
            yielded = False
            try:
                with self._mapped_errors():
                    async with self._get_session().post(
                        url, headers=headers, json=body, timeout=timeout
                    ) as resp:
                        await self._check_status(resp)
                        head = await self._stream_head(resp)
                        chunks = _prepend(head, resp.content.iter_any())
                        # Closed explicitly so an abandoned stream releases the socket now.
                        async with (
                            aclosing(iter_sse(chunks)) as events,
                            aclosing(decode(events)) as items,
                        ):
                            with _reply_shape(self._name):
                                while True:
                                    try:
                                        item = await self._next_item(items)
                                    except StopAsyncIteration:
                                        break
                                    yielded = True
                                    yield item
                return
            except RetryableError as exc:
                if yielded:
                    raise LLMError(f"{exc} (after part of the reply was streamed)") from exc
                attempt = await self._backoff_or_raise(exc, attempt)

    async def _next_item(self, items: AsyncIterator[T]) -> T:
        """The stream's next item; LLMError after ``timeout_secs`` without one.

        The socket's read timeout alone is not enough: a server or proxy that sends
        keep-alive comments or pings and never an answer keeps the socket busy for ever.
        Only the wait for the next item is timed, never the caller's time between items.
        Like the other timeouts it is not retried: the user has sat through it already.
        """
        deadline = asyncio.timeout(self._timeout)
        try:
            async with deadline:
                return await anext(items)
        except TimeoutError:
            if not deadline.expired():
                raise  # the socket's own read timeout, reported as before
            raise LLMError(
                f"{self._name}: no reply for {self._timeout:g}s (the server kept the"
                " connection open but sent nothing of an answer)"
            ) from None

    async def _post_json_once(
        self,
        url: str,
        headers: Mapping[str, str],
        body: Any,
        client_timeout: aiohttp.ClientTimeout,
    ) -> Any:
        with self._mapped_errors():
            async with self._get_session().post(
                url, headers=headers, json=body, timeout=client_timeout
            ) as resp:
                await self._check_status(resp)
                return self._decode_json(await resp.read())

    async def _backoff_or_raise(self, exc: RetryableError, attempt: int) -> int:
        if attempt >= self._policy.max_retries:
            tries = attempt + 1
            raise LLMError(f"{exc} (gave up after {tries} attempts)") from exc
        delay = self._policy.delay(attempt, exc.retry_after)
        log.warning(
            "%s: %s; retry %d/%d in %.2fs",
            self._name,
            exc,
            attempt + 1,
            self._policy.max_retries,
            delay,
        )
        await asyncio.sleep(delay)
        return attempt + 1

    @contextmanager
    def _mapped_errors(self) -> Iterator[None]:
        """Turn aiohttp and timeout exceptions into LLMError / RetryableError."""
        try:
            yield
        except LLMError as exc:
            # Also raised by the stream decoders, from what the server said in the stream.
            exc.args = (self.scrub(str(exc)),)
            raise
        # Timeouts are not retried: the user has already sat through the whole timeout.
        # (Checked first: aiohttp's ServerTimeoutError is also a connection error.)
        except TimeoutError as exc:
            raise LLMError(f"{self._name}: request timed out after {self._timeout:g}s") from exc
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise RetryableError(f"{self._name}: connection failed: {self._describe(exc)}") from exc
        except aiohttp.ClientError as exc:
            raise LLMError(f"{self._name}: request failed: {self._describe(exc)}") from exc

    def _describe(self, exc: BaseException) -> str:
        return f"{type(exc).__name__}: {self.scrub(str(exc))[:_DETAIL_CHARS]}"

    async def _check_status(self, resp: aiohttp.ClientResponse) -> None:
        if 200 <= resp.status < 300:
            return
        detail = await self._error_detail(resp)
        message = f"{self._name}: HTTP {resp.status}" + (f": {detail}" if detail else "")
        if resp.status in RETRY_STATUSES or resp.status >= 500:
            raise RetryableError(message, parse_retry_after(resp.headers))
        raise LLMError(message)

    async def _stream_head(self, resp: aiohttp.ClientResponse) -> bytes:
        """The bytes read to check that a reply not labelled an event stream is one.

        Some servers label their stream ``application/json``, so the label alone
        decides nothing; but a 200 that really is JSON (an error, a server ignoring
        ``stream``) or an HTML page (a proxy's login page) would read as an empty
        stream, be retried as a cut one, and hide what the server said.
        """
        if resp.content_type == "text/event-stream":
            return b""
        head = await self._read_head(resp, _SNIFF_BYTES)
        if _SSE_START.match(head.removeprefix(codecs.BOM_UTF8)):
            return head
        head += await self._read_head(resp, _DETAIL_BYTES - len(head))
        detail = self._detail(head)
        raise LLMError(
            f"{self._name}: expected an event stream, the server sent {resp.content_type}"
            + (f": {detail}" if detail else "")
        )

    @staticmethod
    async def _read_head(resp: aiohttp.ClientResponse, limit: int) -> bytes:
        head = b""
        while len(head) < limit and (chunk := await resp.content.read(limit - len(head))):
            head += chunk
        return head

    async def _error_detail(self, resp: aiohttp.ClientResponse) -> str:
        try:
            raw = await resp.content.read(_DETAIL_BYTES)
        except (aiohttp.ClientError, TimeoutError):
            return ""
        return self._detail(raw)

    def _detail(self, raw: bytes) -> str:
        return self.scrub(" ".join(error_text(raw).split())[:_DETAIL_CHARS])

    def _decode_json(self, raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except UNREADABLE_JSON:
            raise LLMError(f"{self._name}: the server sent a reply that is not JSON") from None

    def scrub(self, text: str) -> str:
        """Replace every known secret in ``text`` with ``***``."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text
