"""The WebSocket protocol's published JSON schema is its models', and says what they do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from picobot.channels.websocket.frames import protocol_schema
from picobot.channels.websocket.protocol import (
    encode_end,
    encode_error,
    encode_event,
    encode_hello,
    encode_history,
    encode_pong,
    parse_client_message,
    parse_server_frame,
)
from picobot.messages import Outbound, OutboundKind

ROOT = Path(__file__).resolve().parents[3]
PUBLISHED = ROOT / "docs" / "websocket-protocol.schema.json"


def validator(side: str) -> Draft202012Validator:
    schema = protocol_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator({**schema, "$ref": f"#/$defs/{side}"})


def test_the_published_schema_is_generated_from_the_models() -> None:
    # Regenerate: python -m picobot.channels.websocket.frames > docs/websocket-protocol.schema.json
    printed = subprocess.run(
        [sys.executable, "-m", "picobot.channels.websocket.frames"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert json.loads(printed) == protocol_schema()
    assert json.loads(PUBLISHED.read_text(encoding="utf-8")) == protocol_schema()


def _event(kind: OutboundKind) -> Outbound:
    if kind is OutboundKind.CONFIRM_REQUEST:
        return Outbound(kind, "Delete 3?", session_id="s", token="t")
    if kind is OutboundKind.ERROR:
        return Outbound(kind, "No.", session_id="s", code="denied")
    return Outbound(kind, "" if kind is OutboundKind.SESSION else "text", session_id="s")


@pytest.mark.parametrize("kind", [k for k in OutboundKind if k is not OutboundKind.DOCUMENT])
def test_every_kernel_event_is_a_documented_frame(kind: OutboundKind) -> None:
    # A new kind of kernel event must get a frame before a channel can send it.
    frame = encode_event(_event(kind), "7")
    validator("server").validate(json.loads(frame))
    assert parse_server_frame(frame).event == _event(kind)


def test_a_document_event_reaches_a_client_as_its_caption_without_the_path() -> None:
    event = Outbound(OutboundKind.DOCUMENT, "Your data", session_id="s", path="/srv/x.jsonl")
    frame = encode_event(event, "7")
    validator("server").validate(json.loads(frame))
    assert "/srv/x.jsonl" not in frame
    assert parse_server_frame(frame).event == Outbound(OutboundKind.NOTICE, "Your data", "s")


@pytest.mark.parametrize(
    "frame",
    [
        encode_hello("ws:alice", "scripted", 4096),
        encode_history("s1", [("user", "hi")], "h"),
        encode_history(None, []),
        encode_pong("p"),
        encode_end(),
        encode_error("rate_limited", "Slow down.", "9"),
        encode_event(Outbound(OutboundKind.TOKEN, "tok")),
    ],
)
def test_channel_frames_match_the_schema(frame: str) -> None:
    validator("server").validate(json.loads(frame))


@pytest.mark.parametrize(
    ("frame", "accepted"),
    [
        ({"type": "chat", "text": "hi", "session_id": "s", "id": "1"}, True),
        ({"type": "confirm", "token": "t", "answer": "y"}, True),
        ({"type": "history", "limit": 200}, True),
        ({"type": "ping"}, True),
        ({"type": "chat"}, False),
        ({"type": "chat", "text": 5}, False),
        ({"type": "chat", "text": "hi", "id": "x" * 65}, False),
        ({"type": "history", "limit": 0}, False),
        ({"type": "history", "limit": "5"}, False),
        ({"type": "shout"}, False),
        ({"text": "hi"}, False),
    ],
)
def test_the_client_schema_is_the_parsers_rule(frame: dict[str, Any], accepted: bool) -> None:
    assert validator("client").is_valid(frame) == accepted
    try:
        parse_client_message(json.dumps(frame))
    except Exception:
        parsed = False
    else:
        parsed = True
    assert parsed == accepted
