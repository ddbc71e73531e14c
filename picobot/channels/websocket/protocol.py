"""The WebSocket channel's wire format, without any I/O (the sans-I/O half of the channel).

Every frame is one JSON object with a ``type``. Clients send ``chat``, ``confirm``,
``history`` and ``ping``; an optional string ``id`` on a client message comes back as
``reply_to`` on every frame answering it. The server sends ``hello`` once after the
upgrade, then per message: the kernel's events (``session``, ``token``, ``done``,
``notice``, ``confirm_request``, ``error``) or ``history``, closed by exactly one ``end``;
``ping`` gets a ``pong`` and no ``end``. A frame that cannot be parsed gets one ``error``
(without ``reply_to``, since nothing in it can be trusted) and no ``end``.

Also here, because they are pure functions of their input: the API-key list parser (the
per-identity token bucket is :class:`picobot.ratelimit.TokenBucket`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from picobot.errors import UNREADABLE_JSON, ConfigError
from picobot.messages import Outbound, OutboundKind, storable

PROTOCOL_VERSION = 1
MIN_KEY_LENGTH = 16
KEY_PREFIX_LENGTH = 8
IDENTITY_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
DEFAULT_HISTORY_LIMIT = 50
MAX_HISTORY_LIMIT = 200
_MAX_ID_CHARS = 64
_MAX_REF_CHARS = 256  # session ids and confirmation tokens


class ProtocolError(Exception):
    """A client frame that cannot be accepted; ``message`` is safe to send back."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# --- client -> server ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientChat:
    """A chat message or slash command; ``session_id`` asks for one of the caller's sessions."""

    text: str
    session_id: str | None = None
    id: str | None = None


@dataclass(frozen=True, slots=True)
class ClientConfirm:
    """The answer to a ``confirm_request``, carrying its token."""

    token: str
    answer: str
    id: str | None = None


@dataclass(frozen=True, slots=True)
class ClientHistory:
    """Ask for the current session's last ``limit`` messages."""

    limit: int = DEFAULT_HISTORY_LIMIT
    id: str | None = None


@dataclass(frozen=True, slots=True)
class ClientPing:
    """An application-level ping, answered at once with ``pong``."""

    id: str | None = None


ClientMessage = ClientChat | ClientConfirm | ClientHistory | ClientPing


def _load_object(frame: str | bytes, max_bytes: int | None) -> dict[str, Any]:
    size = len(frame) if isinstance(frame, bytes) else len(frame.encode("utf-8", "replace"))
    if max_bytes is not None and size > max_bytes:
        raise ProtocolError("too_large", f"Message too large (limit {max_bytes} bytes).")
    try:
        data = json.loads(frame)
    except UNREADABLE_JSON:
        raise ProtocolError("bad_json", "Message is not valid JSON.") from None
    if not isinstance(data, dict):
        raise ProtocolError("bad_message", "Message must be a JSON object.")
    return data


def _string(data: Mapping[str, Any], name: str, *, max_chars: int | None = None) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        what = "is missing" if value is None else "must be a string"
        raise ProtocolError("bad_field", f"Field '{name}' {what}.")
    if max_chars is not None and len(value) > max_chars:
        raise ProtocolError("bad_field", f"Field '{name}' is too long.")
    if not storable(value):
        raise ProtocolError("bad_field", f"Field '{name}' is not valid Unicode.")
    return value


def _optional_string(data: Mapping[str, Any], name: str, max_chars: int) -> str | None:
    if data.get(name) is None:
        return None
    return _string(data, name, max_chars=max_chars)


def parse_client_message(frame: str | bytes, max_bytes: int | None = None) -> ClientMessage:
    """Parse one client frame; raise :class:`ProtocolError` if it is not acceptable.

    ``max_bytes`` bounds the frame's UTF-8 size. Unknown extra fields are ignored so
    that newer clients can talk to older servers.
    """
    data = _load_object(frame, max_bytes)
    kind = data.get("type")
    if not isinstance(kind, str):
        raise ProtocolError("bad_field", "Field 'type' must be a string.")
    msg_id = _optional_string(data, "id", _MAX_ID_CHARS)
    if kind == "chat":
        return ClientChat(
            text=_string(data, "text"),
            session_id=_optional_string(data, "session_id", _MAX_REF_CHARS),
            id=msg_id,
        )
    if kind == "confirm":
        return ClientConfirm(
            token=_string(data, "token", max_chars=_MAX_REF_CHARS),
            answer=_string(data, "answer", max_chars=_MAX_ID_CHARS),
            id=msg_id,
        )
    if kind == "history":
        limit = data.get("limit", DEFAULT_HISTORY_LIMIT)
        # bool is an int subclass; "limit": true is a client bug, not 1.
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise ProtocolError("bad_field", "Field 'limit' must be an integer.")
        if not 1 <= limit <= MAX_HISTORY_LIMIT:
            raise ProtocolError("bad_field", f"Field 'limit' must be 1..{MAX_HISTORY_LIMIT}.")
        return ClientHistory(limit=limit, id=msg_id)
    if kind == "ping":
        return ClientPing(id=msg_id)
    raise ProtocolError("unknown_type", "Unknown message type.")


def encode_client_message(message: ClientMessage) -> str:
    """Serialize a client message (used by the remote TUI and tests)."""
    data: dict[str, Any]
    if isinstance(message, ClientChat):
        data = {"type": "chat", "text": message.text}
        if message.session_id is not None:
            data["session_id"] = message.session_id
    elif isinstance(message, ClientConfirm):
        data = {"type": "confirm", "token": message.token, "answer": message.answer}
    elif isinstance(message, ClientHistory):
        data = {"type": "history", "limit": message.limit}
    else:
        data = {"type": "ping"}
    if message.id is not None:
        data["id"] = message.id
    return _dump(data)


# --- server -> client ---------------------------------------------------------------


def _dump(data: Mapping[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _with_reply_to(data: dict[str, Any], reply_to: str | None) -> str:
    if reply_to is not None:
        data["reply_to"] = reply_to
    return _dump(data)


def encode_event(event: Outbound, reply_to: str | None = None) -> str:
    """Serialize one kernel event as a server frame."""
    data: dict[str, Any] = {"type": event.kind.value}
    kind = event.kind
    if kind is OutboundKind.ERROR:
        data["code"] = event.code or "error"
        data["message"] = event.text
    elif kind is OutboundKind.CONFIRM_REQUEST:
        data["token"] = event.token
        data["prompt"] = event.text
    elif kind is not OutboundKind.SESSION:
        data["text"] = event.text
    if event.session_id is not None:
        data["session_id"] = event.session_id
    return _with_reply_to(data, reply_to)


def encode_error(code: str, message: str, reply_to: str | None = None) -> str:
    """An ``error`` frame raised by the channel itself (not by the kernel)."""
    return _with_reply_to({"type": "error", "code": code, "message": message}, reply_to)


def encode_hello(user_id: str, model: str, max_message_bytes: int) -> str:
    """The first frame of a connection: who the key is and what answers."""
    return _dump(
        {
            "type": "hello",
            "protocol": PROTOCOL_VERSION,
            "user_id": user_id,
            "model": model,
            "max_message_bytes": max_message_bytes,
        }
    )


def encode_history(
    session_id: str | None, messages: list[tuple[str, str]], reply_to: str | None = None
) -> str:
    """The answer to ``history``: the session id and ``{role, content}`` items, oldest first."""
    items = [{"role": role, "content": content} for role, content in messages]
    return _with_reply_to(
        {"type": "history", "session_id": session_id, "messages": items}, reply_to
    )


def encode_pong(reply_to: str | None = None) -> str:
    """The answer to ``ping``."""
    return _with_reply_to({"type": "pong"}, reply_to)


def encode_end(reply_to: str | None = None) -> str:
    """Closes the answer to one chat, confirm or history message."""
    return _with_reply_to({"type": "end"}, reply_to)


@dataclass(frozen=True, slots=True)
class ServerFrame:
    """A parsed server frame as a client sees it.

    ``event`` is set for the kernel's event types; ``history`` for a history answer;
    the other fields for ``hello``. ``type`` is always the raw frame type.
    """

    type: str
    reply_to: str | None = None
    event: Outbound | None = None
    session_id: str | None = None
    history: tuple[tuple[str, str], ...] = ()
    user_id: str = ""
    model: str = ""
    max_message_bytes: int | None = None


def _opt(data: Mapping[str, Any], name: str) -> str | None:
    value = data.get(name)
    return value if isinstance(value, str) else None


def parse_server_frame(frame: str | bytes) -> ServerFrame:
    """Parse a server frame (client side); raise :class:`ProtocolError` if malformed."""
    data = _load_object(frame, None)
    kind = _string(data, "type")
    reply_to = _opt(data, "reply_to")
    session_id = _opt(data, "session_id")
    if kind == "hello":
        limit = data.get("max_message_bytes")
        return ServerFrame(
            kind,
            user_id=_string(data, "user_id"),
            model=_opt(data, "model") or "",
            max_message_bytes=limit if isinstance(limit, int) else None,
        )
    if kind == "history":
        items = data.get("messages")
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise ProtocolError("bad_field", "Field 'messages' must be a list of objects.")
        pairs = tuple((_string(i, "role"), _string(i, "content")) for i in items)
        return ServerFrame(kind, reply_to, session_id=session_id, history=pairs)
    if kind in ("pong", "end"):
        return ServerFrame(kind, reply_to)
    try:
        out_kind = OutboundKind(kind)
    except ValueError:
        raise ProtocolError("unknown_type", f"Unknown server frame type {kind!r}.") from None
    if out_kind is OutboundKind.ERROR:
        event = Outbound(
            out_kind, _string(data, "message"), session_id=session_id, code=_opt(data, "code")
        )
    elif out_kind is OutboundKind.CONFIRM_REQUEST:
        event = Outbound(
            out_kind, _string(data, "prompt"), session_id=session_id, token=_string(data, "token")
        )
    else:
        event = Outbound(out_kind, _opt(data, "text") or "", session_id=session_id)
    return ServerFrame(kind, reply_to, event=event, session_id=session_id)


# --- API keys and rate limit ----------------------------------------------------------


def parse_api_keys(raw: str, env_name: str) -> dict[str, str]:
    """Parse ``key[:identity],...`` into ``{key: user_id}``; raise ConfigError naming the var.

    The user id is ``ws:<identity>`` or ``ws:<first 8 chars of the key>``. Keys shorter
    than 16 characters are refused, so that a logged or shown prefix does not make the
    rest guessable; an unnamed key whose prefix is another entry's user (unnamed or
    named, in either order) is refused because they would silently share one user's
    data. Several keys named with the same identity share it on purpose. Error
    messages never contain a key.
    """
    keys: dict[str, str] = {}
    unnamed: set[str] = set()  # user ids derived from a key's prefix
    for position, entry in enumerate(raw.split(","), start=1):
        entry = entry.strip()
        if not entry:
            continue
        key, sep, name = entry.partition(":")
        key, name = key.strip(), name.strip()
        where = f"{env_name}: entry {position}"
        if len(key) < MIN_KEY_LENGTH:
            raise ConfigError(f"{where}: API keys must be at least {MIN_KEY_LENGTH} characters")
        if sep and not IDENTITY_PATTERN.match(name):
            raise ConfigError(f"{where}: the identity must match {IDENTITY_PATTERN.pattern}")
        user_id = f"ws:{name}" if sep else f"ws:{key[:KEY_PREFIX_LENGTH]}"
        if key in keys:
            raise ConfigError(f"{where}: duplicate key")
        clash = user_id in keys.values() if not sep else user_id in unnamed
        if clash:
            raise ConfigError(
                f"{where}: two keys share the user {user_id}; name them with key:identity"
            )
        if not sep:
            unnamed.add(user_id)
        keys[key] = user_id
    return keys
