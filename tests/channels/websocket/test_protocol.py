"""The WebSocket wire format, API-key parsing and the token bucket: no sockets."""

from __future__ import annotations

import json

import pytest

from picobot.channels.websocket.frames import ClientChat, ClientConfirm, ClientHistory, ClientPing
from picobot.channels.websocket.protocol import (
    ClientMessage,
    ProtocolError,
    encode_client_message,
    encode_end,
    encode_error,
    encode_event,
    encode_hello,
    encode_history,
    encode_pong,
    parse_api_keys,
    parse_client_message,
    parse_server_frame,
)
from picobot.errors import ConfigError
from picobot.messages import Outbound, OutboundKind, error, notice
from picobot.ratelimit import TokenBucket

KEY_A = "a" * 8 + "-secret-part-1"
KEY_B = "bbbbbbbb-other-secret"

# --- client frames -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        ('{"type":"chat","text":"hi"}', ClientChat(text="hi")),
        (
            '{"type":"chat","text":"hi","session_id":"s1","id":"7"}',
            ClientChat(text="hi", session_id="s1", id="7"),
        ),
        ('{"type":"chat","text":"hi","session_id":null}', ClientChat(text="hi")),
        ('{"type":"confirm","token":"t","answer":"y"}', ClientConfirm(token="t", answer="y")),
        ('{"type":"history"}', ClientHistory(limit=50)),
        ('{"type":"history","limit":5,"id":"h"}', ClientHistory(limit=5, id="h")),
        ('{"type":"ping","id":"p"}', ClientPing(id="p")),
        ('{"type":"ping","extra":"ignored"}', ClientPing()),
        (b'{"type":"chat","text":"bytes too"}', ClientChat(text="bytes too")),
    ],
)
def test_valid_client_messages_parse(frame: str | bytes, expected: ClientMessage) -> None:
    assert parse_client_message(frame, 1000) == expected


@pytest.mark.parametrize(
    ("frame", "code", "needle"),
    [
        ("{not json", "bad_json", "not valid JSON"),
        (b"\xff\xfe\x00garbage", "bad_json", "not valid JSON"),
        ("", "bad_json", "not valid JSON"),
        ('["chat","hi"]', "bad_message", "JSON object"),
        ('"chat"', "bad_message", "JSON object"),
        ("null", "bad_message", "JSON object"),
        ('{"text":"hi"}', "bad_field", "'type'"),
        ('{"type":7}', "bad_field", "'type'"),
        ('{"type":"shout","text":"hi"}', "unknown_type", "Unknown message type"),
        ('{"type":"chat"}', "bad_field", "'text' is missing"),
        ('{"type":"chat","text":5}', "bad_field", "'text' must be a string"),
        ('{"type":"chat","text":"hi","session_id":5}', "bad_field", "'session_id'"),
        ('{"type":"chat","text":"hi","id":5}', "bad_field", "'id'"),
        ('{"type":"chat","text":"hi","id":"' + "x" * 65 + '"}', "bad_field", "too long"),
        ('{"type":"confirm","answer":"y"}', "bad_field", "'token' is missing"),
        ('{"type":"confirm","token":"t"}', "bad_field", "'answer' is missing"),
        ('{"type":"confirm","token":"t","answer":true}', "bad_field", "'answer'"),
        ('{"type":"history","limit":"5"}', "bad_field", "'limit' must be an integer"),
        ('{"type":"history","limit":true}', "bad_field", "'limit' must be an integer"),
        ('{"type":"history","limit":0}', "bad_field", "'limit' must be at least 1"),
        ('{"type":"history","limit":201}', "bad_field", "'limit' must be at most 200"),
    ],
)
def test_malformed_client_messages_raise_protocol_errors(
    frame: str | bytes, code: str, needle: str
) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_client_message(frame, 1000)
    assert caught.value.code == code
    assert needle in caught.value.message


@pytest.mark.parametrize(
    "frame",
    [
        "[" * 50_000,
        "[" * 30_000 + "]" * 30_000,
        '{"type":"chat","text":' + '{"a":' * 12_000,
        b"[" * 50_000,
    ],
)
def test_nesting_past_the_recursion_limit_is_bad_json(frame: str | bytes) -> None:
    # Within the default max_message_bytes, yet deep enough to exhaust the recursion
    # of the JSON decoder: a documented bad_json, never a RecursionError.
    with pytest.raises(ProtocolError) as caught:
        parse_client_message(frame, 65_536)
    assert caught.value.code == "bad_json"
    assert "not valid JSON" in caught.value.message


def test_oversize_frames_are_refused_by_utf8_size_before_parsing() -> None:
    text = "é" * 30  # 60 bytes in UTF-8, 30 characters
    frame = json.dumps({"type": "chat", "text": text}, ensure_ascii=False)
    limit = len(frame.encode()) - 1
    assert len(frame) < limit  # counted in characters it would pass
    with pytest.raises(ProtocolError) as caught:
        parse_client_message(frame, limit)
    assert caught.value.code == "too_large"
    assert str(limit) in caught.value.message
    assert parse_client_message(frame, limit + 1) == ClientChat(text=text)
    # Oversize garbage is refused for its size, not parsed at all.
    with pytest.raises(ProtocolError, match="too large"):
        parse_client_message("{" * 2000, 1000)


@pytest.mark.parametrize(
    "message",
    [
        ClientChat(text="hello", session_id="s9", id="1"),
        ClientChat(text="no extras"),
        ClientConfirm(token="tok", answer="n", id="2"),
        ClientHistory(limit=12, id="3"),
        ClientPing(id="4"),
    ],
)
def test_client_messages_round_trip(message: ClientMessage) -> None:
    assert parse_client_message(encode_client_message(message)) == message


# --- server frames -------------------------------------------------------------------


def test_kernel_events_serialize_to_the_documented_shapes() -> None:
    def enc(event: Outbound, reply_to: str | None = None) -> object:
        return json.loads(encode_event(event, reply_to))

    assert enc(Outbound(OutboundKind.SESSION, session_id="s")) == {
        "type": "session",
        "session_id": "s",
    }
    assert enc(Outbound(OutboundKind.TOKEN, "Hel", session_id="s"), "1") == {
        "type": "token",
        "text": "Hel",
        "session_id": "s",
        "reply_to": "1",
    }
    assert enc(Outbound(OutboundKind.DONE, "Hello", session_id="s")) == {
        "type": "done",
        "text": "Hello",
        "session_id": "s",
    }
    assert enc(notice("Started.")) == {"type": "notice", "text": "Started."}
    assert enc(Outbound(OutboundKind.CONFIRM_REQUEST, "Delete 3?", token="t1")) == {
        "type": "confirm_request",
        "token": "t1",
        "prompt": "Delete 3?",
    }
    assert enc(error("No such session.", code="denied")) == {
        "type": "error",
        "code": "denied",
        "message": "No such session.",
    }
    assert json.loads(encode_pong("p")) == {"type": "pong", "reply_to": "p"}
    assert json.loads(encode_end()) == {"type": "end"}
    assert json.loads(encode_error("rate_limited", "Slow down.", "9")) == {
        "type": "error",
        "code": "rate_limited",
        "message": "Slow down.",
        "reply_to": "9",
    }


@pytest.mark.parametrize(
    "event",
    [
        Outbound(OutboundKind.SESSION, session_id="s"),
        Outbound(OutboundKind.TOKEN, "tok", session_id="s"),
        Outbound(OutboundKind.DONE, "full reply", session_id="s"),
        notice("a notice", "s"),
        notice("no session"),
        Outbound(OutboundKind.CONFIRM_REQUEST, "Sure?", session_id="s", token="t"),
        error("bad", code="denied", session_id="s"),
    ],
)
def test_events_round_trip_through_the_client_parser(event: Outbound) -> None:
    frame = parse_server_frame(encode_event(event, "42"))
    assert frame.event == event
    assert frame.reply_to == "42"
    assert frame.type == event.kind.value


def test_hello_and_history_round_trip() -> None:
    hello = parse_server_frame(encode_hello("ws:alice", "scripted", 4096))
    assert (hello.type, hello.user_id, hello.model, hello.max_message_bytes) == (
        "hello",
        "ws:alice",
        "scripted",
        4096,
    )
    assert hello.event is None
    history = parse_server_frame(encode_history("s1", [("user", "hi"), ("assistant", "yo")], "h"))
    assert history.type == "history"
    assert history.session_id == "s1"
    assert history.history == (("user", "hi"), ("assistant", "yo"))
    assert history.reply_to == "h"
    empty = parse_server_frame(encode_history(None, []))
    assert (empty.session_id, empty.history) == (None, ())


@pytest.mark.parametrize(
    "frame",
    [
        "nope",
        "[]",
        '{"type":"weird"}',
        '{"type":"history","messages":"x"}',
        '{"type":"history","messages":[1]}',
        '{"type":"error","code":"x"}',
        '{"type":"confirm_request","prompt":"p"}',
        '{"type":"hello"}',
    ],
)
def test_malformed_server_frames_raise(frame: str) -> None:
    with pytest.raises(ProtocolError):
        parse_server_frame(frame)


# --- API keys ----------------------------------------------------------------------------


def test_keys_map_to_prefix_or_named_identity() -> None:
    keys = parse_api_keys(f" {KEY_A} , {KEY_B}:alice.b-2 ,,", "WS_KEYS")
    assert keys == {KEY_A: "ws:aaaaaaaa", KEY_B: "ws:alice.b-2"}
    assert parse_api_keys("", "WS_KEYS") == {}


def test_two_keys_may_share_a_named_identity() -> None:
    keys = parse_api_keys(f"{KEY_A}:alice,{KEY_B}:alice", "WS_KEYS")
    assert set(keys.values()) == {"ws:alice"}


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ("short-key", "at least 16 characters"),
        (f"{KEY_A},tooshort:bob", "entry 2: API keys must be at least 16"),
        (f"{KEY_A}:", "identity must match"),
        (f"{KEY_A}:bad name", "identity must match"),
        (f"{KEY_A}:" + "x" * 65, "identity must match"),
        (f"{KEY_A},{KEY_A}", "duplicate key"),
        (f"{KEY_A},aaaaaaaa-another-secret", "share the user ws:aaaaaaaa"),
        (f"{KEY_A},{KEY_B}:aaaaaaaa", "share the user ws:aaaaaaaa"),
        (f"{KEY_B}:aaaaaaaa,{KEY_A}", "share the user ws:aaaaaaaa"),
    ],
)
def test_bad_key_lists_fail_naming_the_env_var_but_never_the_key(raw: str, needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_api_keys(raw, "MY_WS_KEYS")
    message = str(caught.value)
    assert message.startswith("MY_WS_KEYS: entry ")
    assert needle in message
    for part in raw.split(","):
        key = part.partition(":")[0]
        assert key not in message


# --- rate limit ----------------------------------------------------------------------------


def test_token_bucket_allows_a_burst_then_refills_at_the_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(per_minute=6, burst=3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    now[0] += 9.9  # 6 a minute is one every 10 seconds
    assert not bucket.take()
    now[0] += 0.1
    assert bucket.take()
    assert not bucket.take()
    now[0] += 3600  # a long pause refills only up to the burst
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
