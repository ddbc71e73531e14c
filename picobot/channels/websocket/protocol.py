"""The WebSocket channel's wire format, without any I/O (the sans-I/O half of the channel).

Every frame is one JSON object with a ``type``. Clients send ``chat``, ``confirm``,
``history``, ``ping`` and ``subscribe``; an optional string ``id`` on a client message comes back as
``reply_to`` on every frame answering it. The server sends ``hello`` once after the
upgrade, then per message: the kernel's events (``session``, ``token``, ``done``,
``notice``, ``confirm_request``, ``error``) or ``history``, closed by exactly one ``end``;
``ping`` gets a ``pong`` and no ``end``; ``subscribe`` gets ``subscribed`` and no
``end``, then ``event`` frames (the caller's current session's events) as they happen.
A frame that cannot be parsed gets one ``error`` (without ``reply_to``, since nothing in
it can be trusted) and no ``end``.

The frames themselves are the pydantic models of :mod:`.frames`; this module reads
and writes them. Also here, because it is a pure function of its input: the API-key
list parser (the per-identity token bucket is :class:`picobot.ratelimit.TokenBucket`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from picobot.auth import key_prefix, parse_key_list
from picobot.channels.websocket.frames import (
    CLIENT,
    CLIENT_TYPES,
    PROTOCOL_VERSION,
    SERVER,
    ClientChat,
    ClientConfirm,
    ClientHistory,
    ClientPing,
    ClientSubscribe,
    ConfirmRequest,
    End,
    ErrorFrame,
    EventFrame,
    Frame,
    Hello,
    HistoryFrame,
    HistoryItem,
    Pong,
    SessionFrame,
    Subscribed,
    TextFrame,
    dump_client,
    dump_server,
)
from picobot.errors import UNREADABLE_JSON, ConfigError
from picobot.messages import Outbound, OutboundKind
from picobot.shapes import problem

IDENTITY_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

ClientMessage = ClientChat | ClientConfirm | ClientHistory | ClientPing | ClientSubscribe


class ProtocolError(Exception):
    """A frame that cannot be accepted; ``message`` is safe to send back."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


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


def _frame_type(data: dict[str, Any]) -> str:
    kind = data.get("type")
    if not isinstance(kind, str):
        raise ProtocolError("bad_field", "Field 'type' must be a string.")
    return kind


def _bad_field(exc: ValidationError) -> ProtocolError:
    found = problem(exc)
    what = "is missing" if found.kind == "missing" else found.detail
    return ProtocolError("bad_field", f"Field '{found.fields[0]}' {what}.")


def parse_client_message(frame: str | bytes, max_bytes: int | None = None) -> ClientMessage:
    """Parse one client frame; raise :class:`ProtocolError` if it is not acceptable.

    ``max_bytes`` bounds the frame's UTF-8 size. Unknown extra fields are ignored so
    that newer clients can talk to older servers.
    """
    data = _load_object(frame, max_bytes)
    if _frame_type(data) not in CLIENT_TYPES:
        raise ProtocolError("unknown_type", "Unknown message type.")
    try:
        return CLIENT.validate_python(data)
    except ValidationError as exc:
        raise _bad_field(exc) from None


def encode_client_message(message: ClientMessage) -> str:
    """Serialize a client message (used by the remote TUI and tests)."""
    return dump_client(message)


# --- server -> client ---------------------------------------------------------------


def _event_frame(event: Outbound, reply_to: str | None) -> Frame:
    kind, sid = event.kind, event.session_id
    if kind is OutboundKind.ERROR:
        return ErrorFrame(
            type="error",
            code=event.code or "error",
            message=event.text,
            session_id=sid,
            reply_to=reply_to,
        )
    if kind is OutboundKind.CONFIRM_REQUEST:
        return ConfirmRequest(
            type="confirm_request",
            token=event.token or "",
            prompt=event.text,
            session_id=sid,
            reply_to=reply_to,
        )
    if kind is OutboundKind.SESSION:
        return SessionFrame(type="session", session_id=sid or "", reply_to=reply_to)
    if kind is OutboundKind.DOCUMENT:
        # Documents are for platform channels (their file APIs); a client here gets the
        # caption as a notice and never the server's file path.
        return TextFrame(type="notice", text=event.text, session_id=sid, reply_to=reply_to)
    # Every other kind is text; a kind TextFrame does not list fails here, loudly.
    return TextFrame.model_validate(
        {"type": kind.value, "text": event.text, "session_id": sid, "reply_to": reply_to}
    )


def encode_event(event: Outbound, reply_to: str | None = None) -> str:
    """Serialize one kernel event as a server frame."""
    return dump_server(_event_frame(event, reply_to))


def encode_error(code: str, message: str, reply_to: str | None = None) -> str:
    """An ``error`` frame raised by the channel itself (not by the kernel)."""
    return dump_server(ErrorFrame(type="error", code=code, message=message, reply_to=reply_to))


def encode_hello(user_id: str, model: str, max_message_bytes: int) -> str:
    """The first frame of a connection: who the key is and what answers."""
    return dump_server(
        Hello(
            type="hello",
            protocol=PROTOCOL_VERSION,
            user_id=user_id,
            model=model,
            max_message_bytes=max_message_bytes,
        )
    )


def encode_history(
    session_id: str | None, messages: list[tuple[str, str]], reply_to: str | None = None
) -> str:
    """The answer to ``history``: the session id and ``{role, content}`` items, oldest first."""
    items = [HistoryItem(role=role, content=content) for role, content in messages]
    return dump_server(
        HistoryFrame(type="history", session_id=session_id, messages=items, reply_to=reply_to)
    )


def encode_pong(reply_to: str | None = None) -> str:
    """The answer to ``ping``."""
    return dump_server(Pong(type="pong", reply_to=reply_to))


def encode_subscribed(events: bool, reply_to: str | None = None) -> str:
    """The answer to ``subscribe``."""
    return dump_server(Subscribed(type="subscribed", events=events, reply_to=reply_to))


def encode_stored_event(
    event_id: int, kind: str, at: float, session_id: str, payload: dict[str, Any]
) -> str:
    """One stored event of the caller's session as an ``event`` frame (no actor: it may
    name an operator's key prefix)."""
    return dump_server(
        EventFrame(
            type="event",
            event_id=event_id,
            event=kind,
            at=at,
            session_id=session_id,
            payload=payload,
        )
    )


def encode_end(reply_to: str | None = None) -> str:
    """Closes the answer to one chat, confirm or history message."""
    return dump_server(End(type="end", reply_to=reply_to))


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


def parse_server_frame(frame: str | bytes) -> ServerFrame:
    """Parse a server frame (client side); raise :class:`ProtocolError` if malformed."""
    data = _load_object(frame, None)
    kind = _frame_type(data)
    try:
        parsed = SERVER.validate_python(data)
    except ValidationError as exc:
        if exc.errors()[0]["type"] == "union_tag_invalid":
            raise ProtocolError("unknown_type", f"Unknown server frame type {kind!r}.") from None
        raise _bad_field(exc) from None
    if isinstance(parsed, Hello):
        return ServerFrame(
            kind,
            user_id=parsed.user_id,
            model=parsed.model,
            max_message_bytes=parsed.max_message_bytes,
        )
    if isinstance(parsed, HistoryFrame):
        pairs = tuple((item.role, item.content) for item in parsed.messages)
        return ServerFrame(kind, parsed.reply_to, session_id=parsed.session_id, history=pairs)
    if isinstance(parsed, Pong | End | Subscribed):
        return ServerFrame(kind, parsed.reply_to)
    if isinstance(parsed, EventFrame):
        return ServerFrame(kind, session_id=parsed.session_id)
    sid = parsed.session_id
    if isinstance(parsed, ErrorFrame):
        event = Outbound(OutboundKind.ERROR, parsed.message, session_id=sid, code=parsed.code)
    elif isinstance(parsed, ConfirmRequest):
        event = Outbound(
            OutboundKind.CONFIRM_REQUEST, parsed.prompt, session_id=sid, token=parsed.token
        )
    elif isinstance(parsed, SessionFrame):
        event = Outbound(OutboundKind.SESSION, "", session_id=sid)
    else:
        event = Outbound(OutboundKind(parsed.type), parsed.text, session_id=sid)
    return ServerFrame(kind, parsed.reply_to, event=event, session_id=sid)


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
    for entry in parse_key_list(raw, env_name, what="API keys", labels=True):
        where, key, name = entry.where, entry.key, entry.label
        if name is not None and not IDENTITY_PATTERN.match(name):
            raise ConfigError(f"{where}: the identity must match {IDENTITY_PATTERN.pattern}")
        user_id = f"ws:{name}" if name is not None else f"ws:{key_prefix(key)}"
        clash = user_id in keys.values() if name is None else user_id in unnamed
        if clash:
            raise ConfigError(
                f"{where}: two keys share the user {user_id}; name them with key:identity"
            )
        if name is None:
            unnamed.add(user_id)
        keys[key] = user_id
    return keys
