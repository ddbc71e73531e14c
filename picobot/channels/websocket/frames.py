"""Every frame of the WebSocket protocol, one pydantic model each.

A client frame's model validates what a client sends; a server frame's model is what
the channel serializes (and what the remote TUI parses); :func:`protocol_schema`
generates the published JSON schema (``docs/websocket-protocol.schema.json``) from
the same models. Unknown extra fields are ignored in both directions, so newer
clients and servers can talk to older ones.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter

from picobot.shapes import STORABLE, DocumentSchema, Text

PROTOCOL_VERSION = 1
DEFAULT_HISTORY_LIMIT = 50
MAX_HISTORY_LIMIT = 200
MAX_ID_CHARS = 64
MAX_REF_CHARS = 256
"""Longest session id or confirmation token a client may send back."""

MessageId = Annotated[str, StringConstraints(max_length=MAX_ID_CHARS), STORABLE]
Ref = Annotated[str, StringConstraints(max_length=MAX_REF_CHARS), STORABLE]


class Frame(BaseModel):
    """A frame: strict types (``"5"`` is not 5), unknown extra fields ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


# --- client -> server ---------------------------------------------------------------


def _type_required(schema: dict[str, Any]) -> None:
    schema["required"] = ["type", *schema.get("required", [])]


class ClientFrame(Frame):
    """A client frame; ``type`` has a default for building one, but a client must send it."""

    model_config = ConfigDict(json_schema_extra=_type_required)


class ClientChat(ClientFrame):
    """A chat message or slash command; ``session_id`` asks for one of the caller's sessions."""

    type: Literal["chat"] = "chat"
    text: Text
    session_id: Ref | None = None
    id: MessageId | None = None


class ClientConfirm(ClientFrame):
    """The answer to a ``confirm_request``, carrying its token (``y``/``yes`` confirms)."""

    type: Literal["confirm"] = "confirm"
    token: Ref
    answer: MessageId
    id: MessageId | None = None


class ClientHistory(ClientFrame):
    """Ask for the current session's last ``limit`` messages."""

    type: Literal["history"] = "history"
    limit: int = Field(DEFAULT_HISTORY_LIMIT, ge=1, le=MAX_HISTORY_LIMIT)
    id: MessageId | None = None


class ClientPing(ClientFrame):
    """An application-level ping, answered at once with ``pong``."""

    type: Literal["ping"] = "ping"
    id: MessageId | None = None


class ClientSubscribe(ClientFrame):
    """Follow (``events`` true) or stop following the events of the caller's current
    session, answered at once with ``subscribed``; then ``event`` frames arrive."""

    type: Literal["subscribe"] = "subscribe"
    events: bool = True
    id: MessageId | None = None


ClientMessage = Annotated[
    ClientChat | ClientConfirm | ClientHistory | ClientPing | ClientSubscribe,
    Field(discriminator="type"),
]
CLIENT: TypeAdapter[ClientChat | ClientConfirm | ClientHistory | ClientPing | ClientSubscribe] = (
    TypeAdapter(ClientMessage)
)
CLIENT_TYPES = frozenset({"chat", "confirm", "history", "ping", "subscribe"})


# --- server -> client ---------------------------------------------------------------
# Fields that default to None are left out of a frame when None (see ``dump_server``);
# a field without a default is always sent, null included.


class Hello(Frame):
    """Sent once, right after the upgrade: who the key is and what answers."""

    type: Literal["hello"]
    protocol: int
    user_id: str
    model: str
    max_message_bytes: int


class SessionFrame(Frame):
    """The session this turn runs in; sent once the message is stored."""

    type: Literal["session"]
    session_id: str
    reply_to: str | None = None


class TextFrame(Frame):
    """A streamed piece of the reply (``token``), the full reply (``done``) or a ``notice``."""

    type: Literal["token", "done", "notice"]
    text: str
    session_id: str | None = None
    reply_to: str | None = None


class ConfirmRequest(Frame):
    """A destructive command awaits ``confirm`` with this token; ``prompt`` says what."""

    type: Literal["confirm_request"]
    token: str
    prompt: str
    session_id: str | None = None
    reply_to: str | None = None


class ErrorFrame(Frame):
    """A failure; ``message`` is safe to show. No ``reply_to`` for an unreadable frame."""

    type: Literal["error"]
    code: str
    message: str
    session_id: str | None = None
    reply_to: str | None = None


class HistoryItem(Frame):
    """One message of a history answer."""

    role: str
    content: str


class HistoryFrame(Frame):
    """The answer to ``history``: ``session_id`` (null before the first message), oldest first."""

    type: Literal["history"]
    session_id: str | None
    messages: list[HistoryItem]
    reply_to: str | None = None


class Pong(Frame):
    """The answer to ``ping``."""

    type: Literal["pong"]
    reply_to: str | None = None


class Subscribed(Frame):
    """The answer to ``subscribe``: whether this connection now follows events."""

    type: Literal["subscribed"]
    events: bool
    reply_to: str | None = None


class EventFrame(Frame):
    """Something that happened in the caller's current session (ids and counts, no text):
    ``event`` is its type (e.g. ``message.appended``), ``event_id`` its place in order,
    ``at`` unix seconds; ``payload`` as in the admin API's events (docs/api.md)."""

    type: Literal["event"]
    event_id: int
    event: str
    at: float
    session_id: str
    payload: dict[str, Any]


class End(Frame):
    """Closes the answer to one ``chat``, ``confirm`` or ``history``."""

    type: Literal["end"]
    reply_to: str | None = None


AnyServerFrame = (
    Hello
    | SessionFrame
    | TextFrame
    | ConfirmRequest
    | ErrorFrame
    | HistoryFrame
    | Pong
    | Subscribed
    | EventFrame
    | End
)
ServerMessage = Annotated[AnyServerFrame, Field(discriminator="type")]
SERVER: TypeAdapter[AnyServerFrame] = TypeAdapter(ServerMessage)


def dump_client(frame: Frame) -> str:
    """A client frame as compact JSON; optional fields that are None are left out."""
    return frame.model_dump_json(exclude_none=True)


def dump_server(frame: Frame) -> str:
    """A server frame as compact JSON; fields still at their default (None) are left out."""
    return frame.model_dump_json(exclude_defaults=True)


def protocol_schema() -> dict[str, Any]:
    """The JSON schema of the protocol: ``client`` frames and ``server`` frames."""
    client = CLIENT.json_schema(schema_generator=DocumentSchema)
    server = SERVER.json_schema(mode="serialization", schema_generator=DocumentSchema)
    defs = {**client.pop("$defs"), **server.pop("$defs")}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "PicoBot WebSocket protocol",
        "description": f"Protocol version {PROTOCOL_VERSION}. Every frame is one JSON object"
        " with a type; see docs/channels.md.",
        "$defs": {"client": client, "server": server, **dict(sorted(defs.items()))},
    }


def main() -> None:
    """Print the protocol's JSON schema (``python -m picobot.channels.websocket.frames``)."""
    print(json.dumps(protocol_schema(), indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
