"""Redaction measured on two corpora: realistic secrets (no misses) and ordinary text.

``corpora/secrets.jsonl``: one JSON object a line, ``{"type": ..., "text": ...}``, the
secret parts of ``text`` between ``«`` and ``»``. Every secret is synthetic (seeded
random characters in the vendor's documented format, most holding ``FAKE``).
``corpora/ordinary.txt``: one ordinary text a line (chat, prose about passwords and
tokens, code that handles secrets, API docs with placeholders, hashes and ids).
``python -m tests.privacy.redaction_report`` prints the same figures and the time.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from picobot.privacy.redaction import (
    _BUILTIN,
    BUILTIN_TYPES,
    Redactor,
    _sub_outside_markers,
    marker,
)

CORPORA = Path(__file__).parent / "corpora"
_SPAN = re.compile("«(.*?)»", re.DOTALL)
_MARKER = re.compile(r"\[REDACTED:[a-z_]+\]")
# A run of this many letters and digits from a secret must not survive redaction.
_RUN = re.compile(r"[A-Za-z0-9]{4,}")

FALSE_POSITIVE_LIMIT = 0.02
"""At most this share of the ordinary texts may be changed."""


@dataclass(frozen=True)
class SecretLine:
    number: int
    kind: str
    text: str
    secrets: tuple[str, ...]
    context: str
    """The text with every secret cut out."""


def load_secrets() -> list[SecretLine]:
    lines = []
    raw = (CORPORA / "secrets.jsonl").read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(raw, 1):
        row = json.loads(line)
        lines.append(
            SecretLine(
                number,
                row["type"],
                row["text"].replace("«", "").replace("»", ""),
                tuple(_SPAN.findall(row["text"])),
                _SPAN.sub("\n", row["text"]),
            )
        )
    return lines


def load_ordinary() -> list[str]:
    return [line for line in (CORPORA / "ordinary.txt").read_text(encoding="utf-8").splitlines()]


def leaks(line: SecretLine, redacted: str) -> list[str]:
    """What of ``line``'s secrets is still in ``redacted``: a whole secret, or a run of
    4+ letters and digits from one that the text around the secrets does not hold."""
    visible = _MARKER.sub("\n", redacted)
    found = [secret for secret in line.secrets if secret in visible]
    for secret in line.secrets:
        found += [run for run in _RUN.findall(secret) if run in visible and run not in line.context]
    return found


def is_miss(line: SecretLine, redactor: Redactor) -> bool:
    out = redactor.redact(line.text)
    return marker(line.kind) not in out or bool(leaks(line, out))


SECRETS = load_secrets()
ORDINARY = load_ordinary()


def test_the_corpora_are_well_formed() -> None:
    assert len(SECRETS) >= 100
    assert len(ORDINARY) >= 150
    assert len(set(ORDINARY)) == len(ORDINARY)
    assert all(text and text == text.strip() for text in ORDINARY)
    for line in SECRETS:
        assert line.kind in BUILTIN_TYPES, line
        assert line.secrets and all(line.secrets), line


@pytest.mark.parametrize("line", SECRETS, ids=lambda line: f"{line.number}-{line.kind}")
def test_every_corpus_secret_is_redacted_with_its_marker(line: SecretLine) -> None:
    out = Redactor().redact(line.text)
    assert marker(line.kind) in out, out
    assert leaks(line, out) == [], out
    assert Redactor().redact(out) == out


def test_no_misses_on_the_secrets_corpus() -> None:
    redactor = Redactor()
    assert [line.number for line in SECRETS if is_miss(line, redactor)] == []


def test_the_leak_check_sees_a_partial_redaction() -> None:
    # The check the corpus relies on: a marker alone is not enough, every secret run
    # must be gone (this is how "passphrase: <words>" used to lose only its first word).
    line = SecretLine(0, "labelled_secret", "pass: a b", ("correct horse battery",), "pass: ")
    assert leaks(line, "pass: [REDACTED:labelled_secret] horse battery") == ["horse", "battery"]
    assert leaks(line, "pass: [REDACTED:labelled_secret]") == []


def test_every_builtin_type_has_corpus_lines() -> None:
    assert {line.kind for line in SECRETS} | {"custom"} == BUILTIN_TYPES


@pytest.mark.parametrize("index", range(len(_BUILTIN)))
def test_every_builtin_rule_redacts_some_corpus_line(index: int) -> None:
    # Per rule, not per type: a type with two rules (the Slack token and its webhook
    # URL) needs a line for each.
    pattern, replace, _ = _BUILTIN[index]
    assert any(
        _sub_outside_markers(pattern, replace, line.text) != line.text for line in SECRETS
    ), pattern.pattern[:60]


def false_positives(redactor: Redactor) -> list[str]:
    return [text for text in ORDINARY if redactor.redact(text) != text]


def test_false_positive_rate_on_the_ordinary_corpus() -> None:
    changed = false_positives(Redactor())
    limit = math.floor(FALSE_POSITIVE_LIMIT * len(ORDINARY))
    assert len(changed) <= limit, changed


# Texts an adversarial review (or the first run of this corpus) saw redacted.
PREVIOUS_FALSE_POSITIVES = [
    "Here's the secret: practice, practice, practice.",
    "Here's the secret: practice... and a lot of patience.",
    "Password: minimum twelve characters, one digit and one symbol.",
    "Secret: Santa",
    '{"password": "string", "username": "string"}',
    "Token: Expired, please sign in again.",
    "Access token: valid for one hour, refresh it with the refresh token.",
    "The secret: patience and good documentation.",
    "const token = await getAccessToken();",
    'export AWS_SECRET_ACCESS_KEY="$(pass show aws/secret)"',
    'password: "{{ vault_db_password }}"',
    '"api_key": "YOUR_API_KEY"',
    '{"token": "<token>", "expires_in": 3600}',
    '{"password": "<password>"}',
    '"password": "your-password"',
    '{"client_secret": "xxxxxxxxxxxxxxxx"}',
    "OPENAI_API_KEY=sk-...",
    "Authorization: Bearer YOUR_ACCESS_TOKEN",
    "postgres://user:password@localhost:5432/mydb",
    "mysql://root:<password>@127.0.0.1:3306/app",
    "redis://:${REDIS_PASSWORD}@redis:6379/0",
    "export GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "Secret: Garden",
    "db_password: !vault |",
    "Authorization: Bearer eyJhbGciOiJIUzI1NiIs...",
]


@pytest.mark.parametrize("text", PREVIOUS_FALSE_POSITIVES)
def test_previous_false_positives_are_left_alone(text: str) -> None:
    assert text in ORDINARY
    assert Redactor().redact(text) == text
