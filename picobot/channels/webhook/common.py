"""What the platform modules share besides signing (:mod:`.signing`).

Reading a verified body: :func:`load_object` and the typed accessors turn JSON into
values or a :class:`WebhookError` (400) that names the bad field, and :func:`safe_name`
keeps ids that become part of a user id free of separators and control characters.
Every number a platform sends is bounded: :func:`load_json` reads an integer of more
than 20 digits as infinity (so one absurd number makes one field bad, not a whole
answer unreadable) and :func:`required` takes integers of at most 53 bits only, so
nothing further down overflows a float or a SQLite column.

Replying: :class:`ReplyApi` makes one POST to a platform's API (JSON, or a form or a
file for an upload) and classifies a failure as :class:`DeliveryError` (retry on 429,
5xx and network errors), with the platform's secrets (a Telegram bot token sits in
the URL) scrubbed from every error text; :func:`split_text` cuts a long reply into
parts the platform accepts;
:func:`http_url` refuses, at start-up, a configured reply URL that could never work.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeVar

import aiohttp

from picobot.backoff import retry_after_secs
from picobot.channels.webhook.base import AnswerTooLarge, DeliveryError, WebhookError
from picobot.config.sections import http_url_problem
from picobot.errors import UNREADABLE_JSON, ConfigError

T = TypeVar("T")

SEND_TIMEOUT = aiohttp.ClientTimeout(total=30)
MAX_ID_CHARS = 256
"""Longest message id accepted."""
MAX_DETAIL_CHARS = 200
"""Longest piece of a platform's error text kept in a DeliveryError."""
MAX_INT = 2**53 - 1
"""The largest integer (either sign) taken from a platform: the largest a JSON number
holds exactly, and more than any id a platform hands out (Telegram's have at most 52
significant bits) or any Unix time."""
MAX_INT_DIGITS = 20
"""Integers with more digits are read as infinity by :func:`load_json`."""
_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")


# Reading a verified body ---------------------------------------------------------


def load_json(raw: bytes | str) -> Any:
    """JSON a platform sent, with an integer of more than :data:`MAX_INT_DIGITS` digits
    read as an infinite float (which :func:`required` refuses where an integer is due).

    Python refuses to convert an integer of more than 4,300 digits and would fail the
    whole document: in a batch of polled updates one such number would make every
    update unreadable. Raises what ``json.loads`` raises (``UNREADABLE_JSON``).
    """
    return json.loads(raw, parse_int=_bounded_int)


def _bounded_int(text: str) -> int | float:
    negative = text.startswith("-")
    if len(text) - negative > MAX_INT_DIGITS:
        return -math.inf if negative else math.inf
    return int(text)


def load_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or WebhookError(400).

    Too deep a nesting (``[[[[...``) is malformed too: the JSON decoder gives up with
    a RecursionError, which must not reach the log as a crash of ours.
    """
    try:
        data = load_json(body)
    except UNREADABLE_JSON:
        raise WebhookError(400, "body is not valid JSON") from None
    if not isinstance(data, dict):
        raise WebhookError(400, "body must be a JSON object")
    return data


def _matches(value: object, kind: type[T]) -> bool:
    # JSON true is not an id: bool is an int subclass, so exclude it explicitly.
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def required(data: Mapping[str, Any], key: str, kind: type[T], where: str) -> T:
    """``data[key]`` if it is a ``kind``, else WebhookError(400) naming ``where.key``.

    An integer must be within +-:data:`MAX_INT` (a 400 "out of range" otherwise).
    """
    value = data.get(key)
    if kind is int and _out_of_range(value):
        raise WebhookError(400, f"{where}.{key} is out of range")
    if not _matches(value, kind):
        raise WebhookError(400, f"{where}.{key} must be {_kind_name(kind)}")
    return value  # type: ignore[return-value]  # checked by _matches


def _out_of_range(value: object) -> bool:
    # An integer too long to read is infinity (load_json).
    if isinstance(value, float):
        return math.isinf(value)
    return isinstance(value, int) and not -MAX_INT <= value <= MAX_INT


def optional(data: Mapping[str, Any], key: str, kind: type[T], where: str) -> T | None:
    """``data[key]``, None when absent or null, WebhookError(400) when of another type."""
    if data.get(key) is None:
        return None
    return required(data, key, kind, where)


def objects(data: Mapping[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    """The list of objects at ``data[key]`` ([] when absent); 400 if it is anything else."""
    values = optional(data, key, list, where) or []
    if not all(isinstance(v, dict) for v in values):
        raise WebhookError(400, f"{where}.{key} must be a list of objects")
    return values


def safe_name(value: str, where: str) -> str:
    """``value`` if it is 1-64 of ``[A-Za-z0-9._-]``, else WebhookError(400).

    For ids that become part of a user id: no ``:`` or ``@`` that could make two
    different senders' ids collide, no spaces or control characters for the logs.
    """
    if not _SAFE_NAME.fullmatch(value):
        raise WebhookError(400, f"{where} is not a valid id")
    return value


def message_id(value: str, where: str) -> str:
    """A platform message id: 1-256 characters, no whitespace or control characters."""
    if not value or len(value) > MAX_ID_CHARS or _CONTROL.search(value):
        raise WebhookError(400, f"{where} is not a valid message id")
    return value


def http_url(value: str, config_key: str) -> str:
    """``value`` if it is an absolute http(s) URL with a host, else a ConfigError.

    For a configured URL that replies are sent to: one that can never be reached
    would otherwise be found out only as every reply failed after its retries. The
    error names ``config_key`` but not the value, which may carry a token.
    """
    problem = http_url_problem(value)
    if problem is not None:
        raise ConfigError(
            f"{config_key} {problem}: replies are POSTed there, so it must be an absolute"
            " http:// or https:// URL such as https://host/path"
        )
    return value


def _kind_name(kind: type[Any]) -> str:
    return {str: "a string", int: "an integer", dict: "a JSON object", list: "a list"}.get(
        kind, f"a {kind.__name__}"
    )


# Replying ----------------------------------------------------------------------


def split_text(text: str, limit: int) -> list[str]:
    """``text`` cut into parts of at most ``limit`` UTF-16 code units, in order.

    Lengths are counted in UTF-16 units (what Telegram counts; never fewer than code
    points, so the count is safe for the others too). A part ends at the last line
    break, else the last space, in its second half, else at the limit; the whitespace
    at a cut is dropped. A blank text has no parts.
    """
    if limit < 2:
        raise ValueError("limit must be at least 2")
    parts: list[str] = []
    rest = text.strip()
    while _units(rest) > limit:
        cut = _fit(rest, limit)
        window = rest[:cut]
        for sep in ("\n", " "):
            at = window.rfind(sep)
            if at >= cut // 2:
                cut = at
                break
        part = rest[:cut].rstrip()
        if part:
            parts.append(part)
        rest = rest[cut:].lstrip()
    if rest:
        parts.append(rest)
    return parts


def _units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _fit(text: str, limit: int) -> int:
    """The longest prefix length (in characters) of at most ``limit`` UTF-16 units."""
    cut = min(len(text), limit)
    while (units := _units(text[:cut])) > limit:
        # Each character is 1 or 2 units: dropping half the excess never overshoots.
        cut -= max(1, (units - limit) // 2)
    return cut


@dataclass(frozen=True, slots=True)
class ApiAnswer:
    """A platform API's answer: status, JSON body (None if not JSON), Retry-After."""

    status: int
    body: Any
    retry_after: float | None

    @property
    def ok(self) -> bool:
        """A 2xx status."""
        return 200 <= self.status < 300

    def field(self, *path: str) -> Any:
        """The value at ``path`` in a JSON object body, or None."""
        value: Any = self.body
        for key in path:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return value


class ReplyApi:
    """One platform's reply API: JSON POSTs and failures that never leak a secret.

    ``service`` names the API in error texts (e.g. ``Telegram sendMessage``);
    ``secrets`` are replaced by ``[REDACTED]`` in every error text built here, which
    the delivery worker logs and stores.
    """

    def __init__(self, service: str, *, secrets: Sequence[str] = ()) -> None:
        self.service = service
        self._secrets = tuple(s for s in secrets if s)

    async def post(
        self,
        session: aiohttp.ClientSession,
        url: str,
        payload: Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
        *,
        deadline: aiohttp.ClientTimeout = SEND_TIMEOUT,
        max_bytes: int | None = None,
    ) -> ApiAnswer:
        """POST ``payload`` as JSON; network failures raise a retryable DeliveryError.

        ``deadline`` bounds the whole call (a long poll needs more than a send);
        ``max_bytes`` the answer (a longer one raises a retryable DeliveryError).
        """
        data = json.dumps(payload, ensure_ascii=False).encode()
        return await self.post_body(
            session, url, data, headers, deadline=deadline, max_bytes=max_bytes
        )

    async def post_body(
        self,
        session: aiohttp.ClientSession,
        url: str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
        *,
        deadline: aiohttp.ClientTimeout = SEND_TIMEOUT,
        max_bytes: int | None = None,
    ) -> ApiAnswer:
        """POST ``body``, JSON already encoded (so a signature covers the bytes sent);
        failures as :meth:`post_data`."""
        all_headers = {"Content-Type": "application/json; charset=utf-8", **(headers or {})}
        return await self.post_data(
            session, url, body, all_headers, deadline=deadline, max_bytes=max_bytes
        )

    async def post_data(
        self,
        session: aiohttp.ClientSession,
        url: str,
        data: bytes | aiohttp.FormData | Mapping[str, str] | BinaryIO,
        headers: Mapping[str, str] | None = None,
        *,
        deadline: aiohttp.ClientTimeout = SEND_TIMEOUT,
        max_bytes: int | None = None,
    ) -> ApiAnswer:
        """POST ``data`` as aiohttp encodes it: bytes as they are, a mapping as form
        fields, a :class:`aiohttp.FormData` as multipart, an open file streamed.

        Network failures and an answer over ``max_bytes`` (never read whole) raise a
        retryable DeliveryError; a URL that aiohttp cannot use (not absolute, not http
        or https) a final one.
        """
        try:
            # No redirects: a bearer token or a token in the path goes where it was
            # configured to go, or nowhere.
            async with session.post(
                url, data=data, headers=headers, allow_redirects=False, timeout=deadline
            ) as resp:
                raw = await _read_at_most(resp, max_bytes)
                if raw is None:
                    raise AnswerTooLarge(f"{self.service}: the answer is over {max_bytes} bytes")
                wait = retry_after_secs(resp.headers.get("Retry-After"))
                return ApiAnswer(resp.status, _json_or_none(raw), wait)
        except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError):
            # A broken base URL will not heal by retrying. The URL itself is not
            # quoted: for Telegram it contains the bot token.
            raise self.error(
                f"{self.service}: the configured URL is invalid", retry=False
            ) from None
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            # Only the type: aiohttp's messages may quote the URL, and with it a token.
            reason = f"{self.service} unreachable: {type(exc).__name__}"
            raise self.error(reason, retry=True) from None

    def failure(
        self,
        answer: ApiAnswer,
        detail: object = None,
        *,
        retry: bool | None = None,
        retry_after: float | None = None,
    ) -> DeliveryError:
        """A DeliveryError for a failed answer.

        ``retry`` defaults to "429 or 5xx"; ``retry_after`` defaults to the header's.
        ``detail`` is the platform's own short error text, shortened and scrubbed.
        """
        reason = f"{self.service} answered HTTP {answer.status}"
        if detail is not None and str(detail).strip():
            text = _CONTROL.sub(" ", str(detail)).strip()
            reason += f": {text[:MAX_DETAIL_CHARS]}"
        if retry is None:
            retry = answer.status == 429 or answer.status >= 500
        wait = retry_after if retry_after is not None else answer.retry_after
        return self.error(reason, retry=retry, retry_after=wait if retry else None)

    def error(self, reason: str, *, retry: bool, retry_after: float | None = None) -> DeliveryError:
        """A DeliveryError whose text has every secret replaced by ``[REDACTED]``."""
        for secret in self._secrets:
            reason = reason.replace(secret, "[REDACTED]")
        return DeliveryError(reason, retry=retry, retry_after_secs=retry_after)


async def _read_at_most(resp: aiohttp.ClientResponse, limit: int | None) -> bytes | None:
    """The answer's body, or None as soon as it grows past ``limit``."""
    if limit is None:
        return await resp.read()
    if resp.content_length is not None and resp.content_length > limit:
        return None
    body = bytearray()
    async for chunk in resp.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def encoded_size(value: Any) -> int:
    """The bytes ``value`` (parsed JSON) takes as compact UTF-8 JSON: the size of the
    webhook body that would have carried it, for the same limit on every transport."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    # A lone surrogate (JSON may escape one) still counts, as the bytes it was sent as.
    return len(text.encode("utf-8", "surrogatepass"))


def _json_or_none(raw: bytes) -> Any:
    try:
        return load_json(raw)
    except UNREADABLE_JSON:
        return None
