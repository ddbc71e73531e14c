"""Tests of the redaction rules one by one: formats, labels, placeholders and prose.

The secrets here are built from pieces, like in test_redaction.py; the corpus test
(test_redaction_corpus.py) runs every rule on realistic lines.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picobot.privacy.redaction import (
    _ALL,
    _BUILTIN,
    BUILTIN_TYPES,
    Redactor,
    _candidates,
    _may_match,
    marker,
)
from picobot.privacy.redaction_context import is_placeholder, reads_as_prose
from picobot.privacy.redaction_rules import TOKEN_RULES

ROOT = Path(__file__).resolve().parents[2]
LABEL = marker("labelled_secret")


def redact(text: str) -> str:
    return Redactor().redact(text)


# -- the prose rule and placeholders ---------------------------------------------------

# (text, what redact() must give): a plain word after "label: " is prose when it is
# capitalized or the sentence goes on; otherwise, or with '=' or quotes, a value.
PROSE_OR_VALUE = [
    ("Secret: Santa", "Secret: Santa"),
    ("Password: minimum twelve characters", "Password: minimum twelve characters"),
    ("Here's the secret: practice, practice.", "Here's the secret: practice, practice."),
    ("the secret: practice... always", "the secret: practice... always"),
    ("Boarding pass: seat 14C", "Boarding pass: seat 14C"),
    ("password: weak", f"password: {LABEL}"),
    ("Password: letmein", f"Password: {LABEL}"),
    ("password: Hunter2 please", f"password: {LABEL} please"),
    ("password=Santa", f"password={LABEL}"),
    ("password:Santa", f"password:{LABEL}"),
    ('"password": "Santa"', f'"password": "{LABEL}"'),
    ('"password": "minimum twelve characters"', f'"password": "{LABEL}"'),
    ("secret: SANTA", f"secret: {LABEL}"),
]


@pytest.mark.parametrize(("text", "expected"), PROSE_OR_VALUE)
def test_a_plain_word_after_a_colon_is_prose_only_when_it_reads_so(
    text: str, expected: str
) -> None:
    assert redact(text) == expected


def test_reads_as_prose_looks_at_the_word_and_what_follows() -> None:
    assert reads_as_prose("Santa", "")
    assert reads_as_prose("minimum", " twelve")
    assert reads_as_prose("practice", ", practice")
    assert not reads_as_prose("minimum", "")
    assert not reads_as_prose("hunter2", " twelve")
    assert not reads_as_prose("McDonald", "")


PLACEHOLDERS = [
    "string",
    "String",
    "null",
    "<password>",
    "<your token>",
    "{password}",
    "{{ vault_pw }}",
    "${DB_PASSWORD}",
    "$(pass show db)",
    "$DB_PASSWORD",
    "%DB_PASSWORD%",
    "XXXX",
    "####",
    "your-password",
    "YOUR_API_KEY",
    "your_token_goes_here",
    "insert-key-here",
    "mysecretpassword",
    "xxx",
    "XXXX-XXXX-XXXX",
    "********",
    "sk-...",
    "abc\u2026",
    "ghp_xxxxxxxxxxxxxxxx",
    "~/.ssh/id_ed25519",
    "./token.txt",
    "/run/secrets/db_password",
    "id_rsa",
    "expired",
    "Invalid",
    "!Ref",
    "!vault",
]


@pytest.mark.parametrize("value", PLACEHOLDERS)
def test_placeholders_are_recognised(value: str) -> None:
    assert is_placeholder(value)


@pytest.mark.parametrize(
    "value",
    [
        "changeme",
        "changeit",
        "hunter2",
        "Tr0ub4dor&3",
        "s3cr3t",
        "letmein",
        "/K7MDENG/bPxRf",
        "$uperSecret1",
        "%ab%",
    ],
)
def test_real_weak_passwords_are_not_placeholders(value: str) -> None:
    # "changeme" and "changeit" are defaults that ship and stay in use: credentials. A
    # base64 secret may start with "/": only system directories make a path; and
    # environment variables are upper-case.
    assert not is_placeholder(value)
    assert redact(f"password={value}") == f"password={LABEL}"


@pytest.mark.parametrize("value", ["string", "<password>", "your-password", "xxx", "null"])
def test_a_quoted_placeholder_stays(value: str) -> None:
    text = f'{{"password": "{value}"}}'
    assert redact(text) == text


# -- labels ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PGPASSWORD=s3cr3t-pg psql", f"PGPASSWORD={LABEL} psql"),
        ("APPSECRET=a1b2c3d4", f"APPSECRET={LABEL}"),
        ("DB_PASS=hunter22", f"DB_PASS={LABEL}"),
        ("user: bob\npass: hunter22", f"user: bob\npass: {LABEL}"),
        ("Pass: hunter22", f"Pass: {LABEL}"),
        ("pw=trustno1", f"pw={LABEL}"),
        ("secret_key_base: 9f86d081884c7d65", f"secret_key_base: {LABEL}"),
        ("mailgun api key: 9f86d081884c7d65", f"mailgun api key: {LABEL}"),
        ("DB_PASSWORD=Tr0ub4dor&3", f"DB_PASSWORD={LABEL}"),
        ("GET /x?token=ab12cd34&page=2", f"GET /x?token={LABEL}&page=2"),
    ],
)
def test_label_forms(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "--- PASS: TestLogin (0.03s)",
        "PASS: 12, FAIL: 0",
        "bypass: enabled1",
        "compass=north42",
        "max_tokens=512",
        "token_count: 1234",
        "const token = await getAccessToken();",
        "token = new Token(user1)",
    ],
)
def test_words_that_are_not_labels_or_values(text: str) -> None:
    assert redact(text) == text


def test_a_passphrase_is_the_rest_of_its_line() -> None:
    text = "passphrase: correct horse battery staple  \nnext line"
    assert redact(text) == f"passphrase: {LABEL}  \nnext line"
    assert redact("GPG_PASSPHRASE=two words") == f"GPG_PASSPHRASE={LABEL}"
    assert redact('"passphrase": "a b c"') == f'"passphrase": "{LABEL}"'
    for code in ("def unlock(passphrase: str) -> None:", "passphrase: ${GPG_PASSPHRASE}"):
        assert redact(code) == code


# -- formats -----------------------------------------------------------------------------


def test_a_url_password_may_hold_slashes_and_at_signs() -> None:
    assert redact("postgres://app:pa/ss@w0rd@db:5432/x") == (
        f"postgres://app:{marker('url_password')}@db:5432/x"
    )
    for text in (
        "https://cdn.example.com:8443/npm/lodash@4.17.21/lodash.min.js",
        "http://localhost:3000/users/@me",
        "postgres://user:password@localhost/db",
    ):
        assert redact(text) == text


def test_docker_auth_must_be_base64_of_user_and_password() -> None:
    creds = base64.b64encode(b"robot:" + b"9" * 12).decode()
    assert redact(f'{{"auth": "{creds}"}}') == f'{{"auth": "{marker("docker_auth")}"}}'
    for value in ("oauth2", "bearer", base64.b64encode(b"no colon here").decode()):
        text = f'{{"auth": "{value}"}}'
        assert redact(text) == text


def test_a_discord_token_starts_with_the_base64_of_a_numeric_id() -> None:
    bot_id = base64.b64encode(b"112233445566778899").decode()
    token = bot_id + ".Gq1xYz." + "h" * 20 + "FAKE" + "k" * 14
    assert redact(f"token {token}") == f"token {marker('discord_token')}"
    # Same shape, but the first part is no base64 of digits: a dotted name in code.
    code = "NetworkManagerConnection.update.onConnectionStateChangedListener(cb)"
    assert redact(code) == code


def test_an_aws_key_id_ends_at_anything_but_an_upper_case_letter_or_digit() -> None:
    key = "AKIA" + "QWERTYUIOP234567"
    assert redact(f"{key}_old") == f"{marker('aws_access_key')}_old"
    assert redact(f"x{key}") == f"x{key}"
    assert redact(f"{key}Z") == f"{key}Z"


def test_vendor_tokens_written_as_examples_stay() -> None:
    for text in (
        "export GITHUB_TOKEN=ghp_" + "x" * 36,
        "hf_" + "X" * 34,
        "OPENAI_API_KEY=sk-proj-abc...",
        "SG." + "x" * 22 + "." + "x" * 43,
    ):
        assert redact(text) == text


def test_a_private_key_with_lines_left_out_is_still_redacted() -> None:
    # Unlike a token written as an example, a key with "..." for its middle lines
    # still holds the lines around them.
    first, last = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQ", "Xk2pQ9rT0a1b2c3d4e5f6g7h8"
    pem = f"-----BEGIN PRIVATE KEY-----\n{first}\n...\n{last}\n-----END PRIVATE KEY-----"
    assert redact(f"key: {pem}") == f"key: {marker('private_key')}"


def test_authorization_credentials_need_a_digit_a_symbol_or_a_case_change() -> None:
    auth = marker("auth_header")
    assert redact("Authorization: Token 9f86d081884c") == f"Authorization: Token {auth}"
    assert redact("authorization: Basic dXNlcjpwYXNz") == f"authorization: Basic {auth}"
    for text in ("Authorization: Token required", "Authorization: see the docs"):
        assert redact(text) == text


def test_every_rule_has_a_documented_format_and_hints() -> None:
    docs = (ROOT / "docs" / "redaction.md").read_text(encoding="utf-8")
    for rule in TOKEN_RULES:
        assert rule.doc and rule.hints, rule.kind
    for kind in BUILTIN_TYPES:
        assert f"`{kind}`" in docs, kind


# -- hints: skipping a rule is only allowed when it cannot match --------------------------

_HINT_WORDS = sorted({word for rule, _ in _ALL for word in rule.hints})
hint_text = st.lists(
    st.one_of(
        st.sampled_from(_HINT_WORDS),
        st.text(st.sampled_from("aZ09_-+/=.:@ \u212a\u017f"), max_size=12),
    ),
    max_size=8,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=hint_text, swap=st.booleans())
def test_candidates_are_exactly_the_rules_whose_hint_holds(text: str, swap: bool) -> None:
    text = text.swapcase() if swap else text
    expected = [i for i, (_, _, hint) in enumerate(_BUILTIN) if _may_match(hint, text)]
    assert _candidates(text) == expected
    for pattern, _, hint in _BUILTIN:
        if pattern.search(text) is not None:
            assert _may_match(hint, text), (pattern.pattern[:40], text)


# -- hostile input: every scan stays linear ------------------------------------------------

_N = 60_000  # under the WebSocket's 64 KiB frame


def hostile_texts() -> list[str]:
    """Inputs shaped to make the newer patterns backtrack, each about 60 KB."""
    n = _N
    return [
        "a://b:c" * (n // 7),
        "x://u:" + "/a" * (n // 2),
        "passphrase: " + "a " * (n // 2),
        "passphrase: " * (n // 12),
        "token=ab" + "&a" * (n // 2),
        "MTAxMjM0NTY3ODkwMTIzNDU2Nzg5." * (n // 29),
        "glpat-" + "a." * (n // 2),
        "Authorization: " + "Basic " * (n // 6),
        "password: " + "a " * (n // 2),
        "A" * n + "PASSWORD",
        "1" * n + ":AA",
        "aaa1Q~" * (n // 6),
        "password=your" + "-a" * (n // 2) + "!",
        'password="{{' + "}" * n + '"',
        '"password": "' + "secret" * (n // 6) + '"',
        "<" + "password" * (n // 8) + "</",
        "<a" * (n // 2) + "</",
        "machine a login b " * (n // 18) + "password",
    ]


def test_hostile_texts_do_not_hang_the_redactor() -> None:
    # A hang detector, not a speed check: linear scans take well under a second for
    # all of them together, a quadratic one would take minutes. A subprocess, so a
    # hang is killed rather than left holding the test run's GIL.
    script = (
        "from picobot.privacy.redaction import Redactor\n"
        "from tests.privacy.test_redaction_rules import hostile_texts\n"
        "for text in hostile_texts():\n"
        "    Redactor().redact(text)\n"
    )
    done = subprocess.run(  # noqa: S603 - fixed argv, our own interpreter
        [sys.executable, "-c", script],
        cwd=ROOT,
        timeout=60,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
