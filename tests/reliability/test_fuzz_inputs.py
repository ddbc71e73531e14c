"""Fuzzing the other untrusted inputs: WebSocket frames, config, memory keys, redaction.

All real code under generated input, nothing simulated: ``parse_client_message`` on
arbitrary frames, ``load_settings``/``validate_file`` on arbitrary TOML documents
written with tomli_w (and on arbitrary ``PICOBOT_*`` environment values),
``validate_key`` on arbitrary keys, and the redactor and its logging filter on
arbitrary text.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
import tomli_w
from hypothesis import given
from hypothesis import strategies as st

from picobot.channels.websocket.frames import (
    MAX_HISTORY_LIMIT,
    ClientChat,
    ClientConfirm,
    ClientHistory,
    ClientPing,
)
from picobot.channels.websocket.protocol import (
    ProtocolError,
    encode_client_message,
    parse_client_message,
)
from picobot.config.reference import collect
from picobot.config.settings import DataSettings, Settings, load_settings, validate_file
from picobot.errors import ConfigError, UserError
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, OutboundKind
from picobot.privacy.redaction import _BUILTIN, RedactingFilter, Redactor, _may_match
from picobot.runtime import open_runtime
from picobot.store.conversation.memories import MAX_KEY_CHARS, RESERVED_PREFIXES, validate_key

from .strategies import FUZZ, SURROGATES_FIXED, chars, jsonish, texts, weighted

pytestmark = pytest.mark.usefixtures("hypothesis_home")

# --- WebSocket client frames ----------------------------------------------------------

PROTOCOL_CODES = {"too_large", "bad_json", "bad_message", "bad_field", "unknown_type"}
_frame_objects = st.fixed_dictionaries(
    {},
    optional={
        "type": weighted(
            (3, st.sampled_from(["chat", "confirm", "history", "ping"])), (1, jsonish)
        ),
        "text": weighted((3, texts), (1, jsonish)),
        "id": weighted((3, texts), (1, jsonish)),
        "session_id": weighted((1, texts), (1, jsonish)),
        "token": weighted((3, texts), (1, jsonish)),
        "answer": weighted((3, st.sampled_from(["y", "n", "yes"])), (1, jsonish)),
        "limit": weighted((3, st.integers(-5, MAX_HISTORY_LIMIT + 5)), (1, jsonish)),
    },
)
frames = weighted(
    (6, _frame_objects.map(lambda d: json.dumps(d))),
    (1, jsonish.map(lambda v: json.dumps(v))),
    (1, st.text(chars(), max_size=60)),
    (1, st.binary(max_size=60)),
)


@FUZZ
@given(frame=frames, max_bytes=st.one_of(st.none(), st.integers(0, 400)))
def test_parse_client_message_gives_a_message_or_a_protocol_error(
    frame: str | bytes, max_bytes: int | None
) -> None:
    try:
        message = parse_client_message(frame, max_bytes)
    except ProtocolError as exc:
        assert exc.code in PROTOCOL_CODES
        assert exc.message
        return
    assert isinstance(message, ClientChat | ClientConfirm | ClientHistory | ClientPing)
    assert message.id is None or (isinstance(message.id, str) and len(message.id) <= 64)
    if isinstance(message, ClientHistory):
        assert 1 <= message.limit <= MAX_HISTORY_LIMIT
    if isinstance(message, ClientChat):
        assert isinstance(message.text, str)
    # What the server accepted, the client library can say again, identically.
    assert parse_client_message(encode_client_message(message)) == message


# Lone surrogates: the JSON escape "\ud800" decodes to a str that SQLite cannot bind,
# so a chat carrying one fails deep in the store (see test_fuzz_webhooks).
surrogate_bug = pytest.mark.xfail(
    not SURROGATES_FIXED, reason="lone surrogates reach SQLite (see report)", strict=True
)


@surrogate_bug
def test_chat_frame_with_a_lone_surrogate_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_client_message('{"type": "chat", "text": "hi \\ud800"}')
    assert caught.value.code == "bad_field"


@surrogate_bug
async def test_kernel_answers_a_lone_surrogate_without_raising(tmp_path: Path) -> None:
    settings = Settings(data=DataSettings(dir=str(tmp_path / "data")))
    async with open_runtime(settings, provider=ScriptedProvider()) as rt:
        inbound = Inbound(Identity("ws", "ws:alice", "ws:alice"), "hi \ud800")
        events = [e async for e in rt.kernel.handle(inbound)]
    assert events[-1].kind in (OutboundKind.DONE, OutboundKind.ERROR)
    assert events[-1].code != "internal"


# --- config files and environment -----------------------------------------------------

TABLES = [t for t in collect() if t.path]
_toml_scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.text(max_size=20),
    st.datetimes(),
    st.dates(),
    st.times(),
)
toml_values: st.SearchStrategy[Any] = st.recursive(
    _toml_scalars,
    lambda kids: st.one_of(
        st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=8), kids, max_size=3)
    ),
    max_leaves=8,
)


def plausible(default: Any, choices: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    """Values of the key's own type, near and far from its default."""
    if choices:
        return st.one_of(st.sampled_from(choices), st.text(max_size=10))
    if isinstance(default, bool):
        return st.booleans()
    if isinstance(default, int):
        return st.one_of(st.just(default), st.integers(-10, 10**6), st.integers())
    if isinstance(default, float):
        return st.one_of(st.just(default), st.floats(-10, 1e6), st.floats())
    if isinstance(default, list):
        return st.lists(st.text(max_size=12), max_size=3)
    return st.text(max_size=20)


def _table(table: Any) -> st.SearchStrategy[dict[str, Any]]:
    fields = {
        k.name: weighted((4, plausible(k.default, k.choices)), (1, toml_values)) for k in table.keys
    }
    return st.fixed_dictionaries({}, optional=fields)


@st.composite
def config_docs(draw: st.DrawFn) -> dict[str, Any]:
    """A TOML document over the real sections and keys, with strays and wrong shapes."""
    doc: dict[str, Any] = {}
    for table in TABLES:
        if not draw(st.booleans()):
            continue
        node = doc
        for part in table.path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            node[table.path[-1]] = draw(weighted((8, _table(table)), (1, toml_values)))
    doc.update(draw(st.dictionaries(st.text(max_size=8), toml_values, max_size=2)))
    return doc


@FUZZ
@given(doc=config_docs())
def test_any_config_file_is_settings_or_a_config_error(doc: dict[str, Any]) -> None:
    path = Path("fuzz.toml").resolve()  # the test's own tmp_path (see tests/conftest.py)
    path.write_text(tomli_w.dumps(doc), encoding="utf-8")
    try:
        problems = validate_file(path)
    except ConfigError as exc:
        problems = [str(exc)]
    try:
        # The file alone, as validate_file reads it: no PICOBOT_* variables from conftest.
        with patch.dict(os.environ):
            del os.environ["PICOBOT_DATA__DIR"]
            del os.environ["PICOBOT_EMBEDDINGS__PROVIDER"]
            settings = load_settings(path)
    except ConfigError as exc:
        assert str(exc)
        assert problems, f"check-config found no problem but loading failed: {exc}"
        return
    assert isinstance(settings, Settings)
    assert problems == [], f"loading succeeded but check-config reports {problems}"


ENV_NAMES = [key.env for table in collect() for key in table.keys] + [
    "PICOBOT_" + "__".join(part.upper() for part in t.path) for t in TABLES
]
_env_values = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=30
)


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


@FUZZ
@given(env=st.dictionaries(st.sampled_from(ENV_NAMES), _env_values, max_size=3))
def test_any_environment_override_is_settings_or_a_config_error(env: dict[str, str]) -> None:
    with environment(env):
        try:
            settings = load_settings()
        except ConfigError as exc:
            assert str(exc)
            return
    assert isinstance(settings, Settings)


# --- memory keys ----------------------------------------------------------------------

KEY_RULE = re.compile(r"[a-z][a-z0-9_]*")
raw_keys = weighted(
    (3, st.text(st.sampled_from("abz019_ AZ-.\t\n\u00e9\u212a"), max_size=70)),
    (2, st.from_regex(r"\s?[a-z][a-z0-9_]{0,70}\s?", fullmatch=True)),
    (1, st.text(chars(), max_size=70)),
    (1, st.sampled_from([f"{p}x" for p in RESERVED_PREFIXES] + ["a" * 64, "a" * 65])),
)


def follows_the_rule(key: str) -> bool:
    return (
        0 < len(key) <= MAX_KEY_CHARS
        and KEY_RULE.fullmatch(key) is not None
        and not key.startswith(RESERVED_PREFIXES)
    )


@FUZZ
@given(raw=raw_keys)
def test_validate_key_accepts_exactly_the_documented_rule(raw: str) -> None:
    try:
        key = validate_key(raw)
    except UserError as exc:
        assert str(exc)
        assert not follows_the_rule(raw.strip()), raw
        return
    assert key == raw.strip()
    assert follows_the_rule(key)
    assert validate_key(key) == key


# --- redaction ------------------------------------------------------------------------

_FRAGMENTS = [
    "sk-",
    "sk-ant-",
    "sk-proj-",
    "ghp_",
    "github_pat_",
    "xoxb-",
    "AKIA",
    "AIza",
    "eyJ",
    ".eyJ",
    "Bearer ",
    "password=",
    "token: ",
    "api_key=",
    "aws_secret_access_key=",
    "https://user:",
    "@host",
    "-----BEGIN PRIVATE KEY-----",
    "-----END PRIVATE KEY-----",
    "[REDACTED:",
    "[REDACTED:custom]",
    "]",
    "EMP-",
    "\n",
    '"',
    "'",
]
redaction_text = st.lists(
    weighted(
        (3, st.sampled_from(_FRAGMENTS)),
        (2, st.text(st.sampled_from("aZ09_-+/=.:@ "), min_size=1, max_size=45)),
        (1, st.text(chars(surrogates=True), max_size=12)),
    ),
    max_size=14,
).map("".join)


@FUZZ
@given(text=redaction_text, enabled=st.booleans())
def test_redactor_never_raises_and_is_idempotent(text: str, enabled: bool) -> None:
    redactor = Redactor([r"EMP-\d+", r"(?i)internal-[a-z]+"], enabled=enabled)
    once = redactor.redact(text)
    assert isinstance(once, str)
    assert redactor.redact(once) == once
    if not enabled:
        assert once == text


@FUZZ
@given(text=redaction_text, swap=st.booleans())
def test_a_rule_is_skipped_only_when_it_cannot_match(text: str, swap: bool) -> None:
    # The hints let redact() skip a rule's regex; they must be a necessary condition of
    # a match, or a secret would slip through. swapcase() exercises the (?i:) rules.
    text = text.swapcase() if swap else text
    for pattern, _, hint in _BUILTIN:
        if pattern.search(text) is not None:
            assert _may_match(hint, text), (pattern.pattern[:40], text)


@FUZZ
@given(msg=redaction_text, args=st.lists(jsonish, max_size=3))
def test_redacting_log_filter_never_raises_or_drops_a_record(msg: str, args: list[Any]) -> None:
    record = logging.LogRecord("fuzz", logging.INFO, __file__, 1, msg, tuple(args), None)
    assert RedactingFilter().filter(record) is True
