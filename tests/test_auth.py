"""The shared key rules: key lists from env vars, the presented key, the key ring."""

from __future__ import annotations

import pytest

from picobot.auth import KeyEntry, KeyRing, key_prefix, only, parse_key_list, presented_key
from picobot.errors import ConfigError

KEY_A = "aaaaaaaa-first-secret"
KEY_B = "bbbbbbbb-second-secret"


def test_a_list_is_split_on_commas_and_blank_entries_are_skipped() -> None:
    entries = parse_key_list(f" {KEY_A} ,, {KEY_B} ", "KEYS", what="API keys", labels=False)
    assert entries == [
        KeyEntry("KEYS: entry 1", KEY_A, None),
        KeyEntry("KEYS: entry 3", KEY_B, None),
    ]
    assert parse_key_list("", "KEYS", what="API keys", labels=False) == []


def test_labels_split_at_the_first_colon_only_when_allowed() -> None:
    raw = f"{KEY_A} : alice:x,{KEY_B}:"
    labelled = parse_key_list(raw, "KEYS", what="API keys", labels=True)
    assert [(e.key, e.label) for e in labelled] == [(KEY_A, "alice:x"), (KEY_B, "")]
    plain = parse_key_list(f"{KEY_A}:alice", "KEYS", what="API keys", labels=False)
    assert [(e.key, e.label) for e in plain] == [(f"{KEY_A}:alice", None)]


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (f"{KEY_A},short-secret", "KEYS: entry 2: chat keys must be at least 16 characters"),
        (f"{KEY_A},{KEY_A}:bob", "KEYS: entry 2: duplicate key"),
    ],
)
def test_short_and_duplicate_keys_are_refused_without_showing_them(raw: str, needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_key_list(raw, "KEYS", what="chat keys", labels=True)
    assert needle in str(caught.value)
    assert KEY_A not in str(caught.value)
    assert "short-secret" not in str(caught.value)


@pytest.mark.parametrize(
    ("authorization", "api_key", "expected"),
    [
        (f"Bearer {KEY_A}", None, KEY_A),
        (f"bearer   {KEY_A} ", KEY_B, KEY_A),
        (f"Basic {KEY_A}", KEY_B, KEY_B),
        ("Bearer  ", f" {KEY_B} ", KEY_B),
        (None, "  ", None),
        (None, None, None),
    ],
)
def test_bearer_first_then_x_api_key(
    authorization: str | None, api_key: str | None, expected: str | None
) -> None:
    assert presented_key(authorization, api_key) == expected


def test_a_repeated_header_counts_as_absent() -> None:
    assert only([KEY_A]) == KEY_A
    assert only([]) is None
    assert only([KEY_A, KEY_B]) is None


def test_the_key_ring_finds_who_a_key_belongs_to() -> None:
    ring = KeyRing([(KEY_A, "alice"), (KEY_B, "bob")])
    assert len(ring) == 2
    assert ring.lookup(KEY_B) == "bob"
    assert ring.lookup(KEY_A[:-1]) is None
    assert ring.lookup("\udcff not utf-8") is None
    assert ring.lookup(None) is None
    assert key_prefix(KEY_A) == "aaaaaaaa"
