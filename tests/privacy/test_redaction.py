"""Tests of secret redaction: every secret type, ordinary chat left alone, the log filter."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picobot.config.settings import DataSettings, PrivacySettings, Settings
from picobot.errors import ConfigError
from picobot.llm.base import ToolCall
from picobot.llm.scripted import ScriptedProvider, ScriptedTurn
from picobot.messages import Identity, Inbound
from picobot.privacy.redaction import (
    BUILTIN_TYPES,
    RedactingFilter,
    Redactor,
    marker,
)
from picobot.privacy.redaction_context import is_placeholder
from picobot.runtime import open_runtime
from picobot.store.json_redaction import redact_json

# Secrets are assembled from pieces so that this file holds no string a secret
# scanner (or GitHub push protection) would flag as a real credential.
ALNUM36 = "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
OPENAI = "sk-" + "proj-" + "Zx9" * 12
OPENAI_LEGACY = "sk-" + "T3Blbk" + "FJ4q" * 10
ANTHROPIC = "sk-" + "ant-" + "api03-" + "Qw8_" * 10
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_STS_ID = "ASIA" + "Y34FZKBOKMUTVV7A"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
GITHUB = "gh" + "p_" + ALNUM36
GITHUB_APP = "gh" + "s_" + ALNUM36
GITHUB_PAT = "github" + "_pat_" + "11ABCDEFG0" + "_" + "x7Y" * 20
SLACK_BOT = "xo" + "xb-" + "1234567890-0987654321-" + "AbCdEfGhIjKlMnOpQrStUvWx"
SLACK_USER = "xo" + "xp-" + "1234567890-abcdefABCDEF"
SLACK_HOOK_PATH = "T0000" + "AAAA/B0000BBBB/" + "XXXXxxxxXXXXxxxxXXXXxxxx"
STRIPE = "sk" + "_live_" + "51Hq" * 6
STRIPE_RESTRICTED = "rk" + "_live_" + "9dKe" * 6
GOOGLE = "AI" + "za" + "SyD" + "-k9_" * 8
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM_BODY = (
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxKLxoS2tFcz"
)
PEM = "-----BEGIN RSA PRIVATE KEY-----\n" + PEM_BODY + "\n-----END RSA PRIVATE KEY-----"
PEM_OPENSSH = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\r\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"
    "\r\nAAAAMwAAAAtzc2gtZWQyNTUxOQAAACDx\r\n-----END OPENSSH PRIVATE KEY-----"
)
# An ASCII-armored OpenPGP secret key (gpg --export-secret-keys --armor): "KEY BLOCK",
# armor headers and a blank line before the body, a checksum line after it.
PGP_HEAD = "-----BEGIN PGP PRIVATE KEY BLOCK-----\nComment: alice@example.org\n\n"
PGP_BODY = (
    "lQOYBGZx3vABCADJ8kq2Yf1p0Vw9Rk3mQe7TzS4uN6bH2cL5aX8dG1jF0iE3oW7r\nhMtP9sKv2YcQ8bWn4LrT6ZfK"
)
PGP = PGP_HEAD + PGP_BODY + "\n=Xk2p\n-----END PGP PRIVATE KEY BLOCK-----"

# (type, text, secret that must vanish)
POSITIVES: list[tuple[str, str, str]] = [
    ("openai_key", f"my key is {OPENAI}, keep it safe", OPENAI),
    ("openai_key", f"OPENAI_API_KEY={OPENAI_LEGACY}", OPENAI_LEGACY),
    ("anthropic_key", f"use {ANTHROPIC} for claude", ANTHROPIC),
    ("aws_access_key", f"aws_access_key_id = {AWS_ID}", AWS_ID),
    ("aws_access_key", f"temporary creds {AWS_STS_ID}.", AWS_STS_ID),
    ("aws_secret_key", f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET),
    ("aws_secret_key", f'"AWS_SECRET_ACCESS_KEY": "{AWS_SECRET}"', AWS_SECRET),
    ("github_token", f"git clone with {GITHUB} please", GITHUB),
    ("github_token", f"GH_TOKEN={GITHUB_APP}", GITHUB_APP),
    ("github_token", f"new fine-grained token {GITHUB_PAT}", GITHUB_PAT),
    ("slack_token", f"bot token {SLACK_BOT}", SLACK_BOT),
    ("slack_token", f"user token: {SLACK_USER}", SLACK_USER),
    ("slack_token", f"post to https://hooks.slack.com/services/{SLACK_HOOK_PATH} now", "B0000"),
    ("stripe_key", f"stripe secret {STRIPE}", STRIPE),
    ("stripe_key", f"restricted {STRIPE_RESTRICTED}", STRIPE_RESTRICTED),
    ("google_api_key", f"maps key {GOOGLE} in the url", GOOGLE),
    ("bearer_token", "Authorization: Bearer abc123DEF456ghi789jkl", "abc123DEF456ghi789jkl"),
    ("bearer_token", "curl -H 'authorization: bearer 8f7e6d5c4b3a2918'", "8f7e6d5c4b3a2918"),
    ("jwt", f"session cookie {JWT} expired", JWT),
    ("jwt", f"Authorization: Bearer {JWT}", JWT),
    ("private_key", f"here is my key:\n{PEM}\nthanks", "MIIEowIBAAKCAQEA"),
    ("private_key", f"{PEM_OPENSSH} ok", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"),
    ("private_key", "-----BEGIN PRIVATE KEY-----\n" + PEM_BODY, "VTLw7onLRnrq0"),
    ("private_key", f"my gpg key:\n{PGP}\nbye", "lQOYBGZx3vABCADJ8kq2"),
    ("private_key", f"truncated:\n{PGP_HEAD}{PGP_BODY}", "hMtP9sKv2YcQ8bWn4LrT6ZfK"),
    ("url_password", "DATABASE_URL=postgres://bob:s3cr3t-pw@db.local:5432/app", "s3cr3t-pw"),
    ("url_password", "redis://:hunter2@cache:6379/0", "hunter2"),
    ("url_password", "https://alice:p@ss%20w0rd@example.com/x", "p@ss%20w0rd"),
    ("labelled_secret", "password=hunter22", "hunter22"),
    ("labelled_secret", "DB_PASSWORD=Tr0ub4dor&3", "Tr0ub4dor"),
    ("labelled_secret", "passwd: correcthorse", "correcthorse"),
    ("labelled_secret", "pwd=s3cret!", "s3cret!"),
    ("labelled_secret", 'secret = "not telling you"', "not telling you"),
    ("labelled_secret", "api_key: 9f86d081884c7d659a2feaa0c55ad015", "9f86d081884c7d659a2"),
    ("labelled_secret", "apikey='zz-top-1983'", "zz-top-1983"),
    ("labelled_secret", "GET /v1/items?token=abcd1234&page=2", "abcd1234"),
    ("labelled_secret", '{"access_token": "ya29.a0AfH6SMB"}', "ya29.a0AfH6SMB"),
    ("labelled_secret", "client_secret=GOCSPX-1a2b3c4d", "GOCSPX-1a2b3c4d"),
    ("labelled_secret", "X-Api-Key: 0123456789abcdef", "0123456789abcdef"),
    ("labelled_secret", "const clientSecret: 'q9w8e7r6'", "q9w8e7r6"),
    ("labelled_secret", "**Password**: Summer2024!", "Summer2024!"),
]


@pytest.mark.parametrize(("kind", "text", "secret"), POSITIVES)
def test_each_secret_type_is_replaced_by_its_marker(kind: str, text: str, secret: str) -> None:
    out = Redactor().redact(text)
    assert marker(kind) in out
    assert secret not in out


def test_labels_and_url_parts_are_kept() -> None:
    r = Redactor()
    assert r.redact("postgres://bob:pw123@db:5432/x") == (
        "postgres://bob:[REDACTED:url_password]@db:5432/x"
    )
    assert r.redact('"password": "a b"') == '"password": "[REDACTED:labelled_secret]"'
    assert r.redact("DB_PASSWORD=hunter22 next") == "DB_PASSWORD=[REDACTED:labelled_secret] next"
    hook = f"https://hooks.slack.com/services/{SLACK_HOOK_PATH}"
    assert r.redact(hook) == "https://hooks.slack.com/services/[REDACTED:slack_token]"
    assert r.redact(f"a\n{PEM}\nb") == "a\n[REDACTED:private_key]\nb"


def test_specific_types_win_over_labels() -> None:
    r = Redactor()
    assert r.redact(f"api_key={OPENAI}") == "api_key=[REDACTED:openai_key]"
    assert r.redact(f"token: {GITHUB}") == "token: [REDACTED:github_token]"
    assert r.redact(f"password={ANTHROPIC}") == "password=[REDACTED:anthropic_key]"


def test_several_secrets_in_one_text() -> None:
    out = Redactor().redact(f"{OPENAI} and {AWS_ID} and password=hunter22")
    assert out == "[REDACTED:openai_key] and [REDACTED:aws_access_key] and password=" + marker(
        "labelled_secret"
    )


GIT_SHA = "3f786850e387550fdab836ed7e6dc881de23001b"
SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

ORDINARY_CHAT = [
    "The pro plan costs $19.99 a month, or €199 a year.",
    "Email me at alice.smith@example.com when you're back.",
    "Docs live at https://docs.python.org/3/library/re.html#re.sub",
    "Health check: http://localhost:8080/health returns 200.",
    "Clone it with git clone ssh://git@github.com/org/repo.git",
    "Connect to postgres://localhost:5432/app without a password locally.",
    f"The fix landed in commit {GIT_SHA}.",
    f"Image digest sha256:{SHA256}",
    "Request id 123e4567-e89b-12d3-a456-426614174000 failed.",
    "My password is weak, I should change it.",
    "Keep it secret, keep it safe.",
    "The token limit is 4000 tokens per turn.",
    "Set max_tokens=512 and temperature=0.7 in the config.",
    'api_key_env = "OPENAI_API_KEY" names the variable, not the key.',
    "We use Bearer authentication for the admin API.",
    "Bearer tokens are sent in the Authorization header.",
    "def login(password: str) -> bool:",
    "token = tokenizer.encode(text)",
    "client = OpenAI(api_key=api_key)",
    "password_hash = bcrypt.hashpw(password, salt)",
    "secret = os.environ['APP_SECRET']",
    "if token == expected: return True",
    "for i in range(10): print(i)",
    "Base64 of hello is aGVsbG8= and of test is dGVzdA==.",
    "Call me on +1 (555) 123-4567 or 555-0199.",
    "scikit-learn and ask-me-anything threads are fun.",
    "The AKIA prefix marks AWS access key ids.",
    "JWTs start with eyJ because of the JSON header.",
    "Meeting at 10:30, room B-12; bring the slides.",
    "password: ${DB_PASSWORD} is read from the environment",
    "Enter the password: ********",
    "PWD=/home/alice/projects",
    "pwd: /home/alice/projects",  # the shell's working directory, shown as a label
    "PWD : ~/src",
    "The secret to good bread is time: 18 hours.",
    "I wrote pwd and cd in the shell",
]


@pytest.mark.parametrize("text", ORDINARY_CHAT)
def test_ordinary_chat_is_unchanged(text: str) -> None:
    assert Redactor().redact(text) == text


def test_disabled_redactor_returns_text_unchanged() -> None:
    text = f"{OPENAI} password=hunter22"
    assert Redactor(enabled=False).redact(text) == text


def test_extra_patterns_are_redacted_as_custom() -> None:
    r = Redactor([r"EMP-\d{6}", r"(?i)project\s+falcon"])
    out = r.redact(f"EMP-123456 works on Project Falcon, key {OPENAI}")
    assert out == "[REDACTED:custom] works on [REDACTED:custom], key [REDACTED:openai_key]"


def test_extra_patterns_never_touch_markers() -> None:
    r = Redactor([r"REDACTED", r"openai_key"])
    once = r.redact(f"{OPENAI} REDACTED")
    assert once == "[REDACTED:openai_key] [REDACTED:custom]"
    assert r.redact(once) == once


@pytest.mark.parametrize("bad", ["(unclosed", "[a-", "*star"])
def test_invalid_extra_pattern_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        # Settings refuse it at load; the redactor still guards code that skips them.
        patterns = ["ok\\d+", bad]
        Redactor.from_settings(PrivacySettings.model_construct(extra_redaction_patterns=patterns))
    text = str(info.value)
    assert "privacy.extra_redaction_patterns" in text
    assert repr(bad) in text


def test_pattern_matching_empty_text_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="matches empty text"):
        Redactor(["x*"])


def test_invalid_pattern_fails_even_when_disabled() -> None:
    with pytest.raises(ConfigError):
        Redactor.from_settings(
            PrivacySettings.model_construct(redact_secrets=False, extra_redaction_patterns=["("])
        )


def test_from_settings_follows_the_privacy_section() -> None:
    text = "EMP-123456 password=hunter22"
    on = Redactor.from_settings(PrivacySettings(extra_redaction_patterns=[r"EMP-\d+"]))
    assert on.redact(text) == "[REDACTED:custom] password=[REDACTED:labelled_secret]"
    off = Redactor.from_settings(PrivacySettings(redact_secrets=False))
    assert off.redact(text) == text


@pytest.mark.parametrize(("kind", "text", "secret"), POSITIVES)
def test_redaction_is_idempotent(kind: str, text: str, secret: str) -> None:
    r = Redactor()
    once = r.redact(text)
    assert r.redact(once) == once


def test_every_positive_case_names_a_builtin_type() -> None:
    # Every built-in type has lines in corpora/secrets.jsonl (test_redaction_corpus.py).
    assert {kind for kind, _, _ in POSITIVES} <= BUILTIN_TYPES


# -- the log filter -------------------------------------------------------------------


@pytest.fixture
def redacting_logger() -> tuple[logging.Logger, list[str]]:
    """A logger whose only handler formats records into a list, through the filter."""
    lines: list[str] = []

    class ListHandler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = ListHandler()
    handler.addFilter(RedactingFilter(Redactor()))
    logger = logging.getLogger("picobot.test.redaction")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, lines


def test_log_filter_redacts_message_and_args(
    redacting_logger: tuple[logging.Logger, list[str]],
) -> None:
    logger, lines = redacting_logger
    logger.info("calling with key %s and %s", OPENAI, {"password": "hunter22"})
    assert lines == [
        "calling with key [REDACTED:openai_key] and {'password': '[REDACTED:labelled_secret]'}"
    ]


def test_log_filter_clears_args_on_the_record() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "url %s", (f"{GITHUB}",), None)
    assert RedactingFilter().filter(record) is True
    assert record.msg == "url [REDACTED:github_token]"
    assert not record.args
    assert record.getMessage() == "url [REDACTED:github_token]"


def test_log_filter_redacts_tracebacks(
    redacting_logger: tuple[logging.Logger, list[str]],
) -> None:
    logger, lines = redacting_logger
    try:
        raise RuntimeError(f"upstream rejected {STRIPE}")
    except RuntimeError:
        logger.exception("request failed")
    assert len(lines) == 1
    assert "RuntimeError: upstream rejected [REDACTED:stripe_key]" in lines[0]
    assert STRIPE not in lines[0]


def test_log_filter_with_caplog(caplog: pytest.LogCaptureFixture) -> None:
    caplog.handler.addFilter(RedactingFilter())
    with caplog.at_level(logging.WARNING, logger="picobot.test.caplog"):
        logging.getLogger("picobot.test.caplog").warning("db at %s", "mysql://root:toor1@db/x")
    assert caplog.messages == ["db at mysql://root:[REDACTED:url_password]@db/x"]
    assert "toor1" not in caplog.text


def test_disabled_log_filter_leaves_records_alone() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "key %s", (OPENAI,), None)
    assert RedactingFilter(Redactor(enabled=False)).filter(record) is True
    assert record.args == (OPENAI,)


# -- properties ---------------------------------------------------------------------

_B64URL = st.text(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-", min_size=5, max_size=40
)


def _secret(
    prefix: str, alphabet: str, size: int, *, exact: bool = False
) -> st.SearchStrategy[str]:
    """``prefix`` plus ``size`` (or more) characters drawn from ``alphabet``."""
    body = st.text(alphabet, min_size=size, max_size=size if exact else size + 20)
    return body.map(lambda s: prefix + s)


# (text holding a secret, the secret part that must disappear)
_SECRETS: st.SearchStrategy[tuple[str, str]] = st.one_of(
    _secret("sk-proj-", "abcXYZ0123456789", 20).map(lambda s: (s, s)),
    _secret("AKIA", "ABCDEFGHJKLMNPQRSTUVWXYZ234567", 16, exact=True).map(lambda s: (s, s)),
    _secret("gh" + "o_", "abcdXYZ0123456789", 36).map(lambda s: (s, s)),
    st.builds(lambda a, b: f"eyJ{a}.eyJ{b}.sig", _B64URL, _B64URL).map(lambda s: (s, s)),
    # A placeholder ("XXXX", "####") stays by design (test_redaction_rules.py).
    _secret("", "abcdefXYZ0123456789!#", 4)
    .filter(lambda s: not is_placeholder(s))
    .map(lambda s: (f"password={s}", s)),
    _secret("", "abc123!$%", 1)
    .filter(lambda s: not is_placeholder(s))
    .map(lambda s: (f"https://u:{s}@host.example", f":{s}@")),
)
# Fragments that sit close to the patterns: separators, labels, markers, prefixes.
_NOISE = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        [
            " ",
            "\n",
            ":",
            "=",
            "@",
            "/",
            "'",
            '"',
            "[",
            "]",
            "-",
            "_",
            "://",
            "token",
            "password",
            "Bearer ",
            "sk-",
            "eyJ",
            "[REDACTED:",
            "[REDACTED:custom]",
            "AKIA",
            "-----BEGIN PRIVATE KEY-----",
        ]
    ),
)
_SAFE_PROSE = st.text("abcdefghijklmnopqrstuvwxyz .,!?'\n", max_size=200)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_SECRETS.map(lambda pair: pair[0]), _NOISE), max_size=12).map("".join))
def test_redact_never_raises_and_is_idempotent(text: str) -> None:
    r = Redactor([r"EMP-\d{3}"])
    once = r.redact(text)
    assert r.redact(once) == once


@settings(max_examples=200, deadline=None)
@given(_SAFE_PROSE)
def test_lowercase_prose_is_never_changed(text: str) -> None:
    assert Redactor().redact(text) == text


@settings(max_examples=200, deadline=None)
@given(_SAFE_PROSE, _SECRETS, _SAFE_PROSE)
def test_secret_inside_prose_is_removed(before: str, pair: tuple[str, str], after: str) -> None:
    text, secret = pair
    out = Redactor().redact(f"{before} {text} {after}")
    assert out.startswith(before + " ") and out.endswith(" " + after)
    # The prose around it may hold the same characters (found: a secret "!!!!" with
    # "!!!!" after it), so the check is on what became of the secret's own text.
    middle = out[len(before) + 1 : len(out) - len(after) - 1]
    assert "[REDACTED:" in middle
    assert secret not in middle


def test_a_secret_exposed_by_another_rules_marker_is_redacted_in_the_same_call() -> None:
    # Found by the fuzz test: "0sk-..." has no word boundary before "sk-", until the
    # custom rule turns "EMP-0" into a marker. One call must give the final text.
    redactor = Redactor([r"EMP-\d+"])
    once = redactor.redact("EMP-0sk-proj-abcdefghijklmnopqrstuvwx")
    assert once == "[REDACTED:custom][REDACTED:openai_key]"
    assert redactor.redact(once) == once


# A labelled value that is one long run of keywords. Before the fix the rule's "is this
# a variable name holding a keyword" lookahead rescanned the run from every keyword in
# it: quadratic, 60 KB (under the WebSocket's 64 KiB frame) held the event loop for
# seconds and 240 KB for minutes. Linear, the 240 KB take milliseconds.
def hostile_values(n: int) -> tuple[str, str]:
    """Labelled values holding ``n`` (or ``2n``) keywords in one run."""
    return ("password=" + "secret" * n + ".", "aws_secret_key=aB" + "key" * 2 * n + "passwordsk-")


def test_a_long_run_of_keywords_as_a_value_is_redacted_whole() -> None:
    for text in hostile_values(300):
        label = text.partition("=")[0]
        assert Redactor().redact(text) == f"{label}=[REDACTED:labelled_secret]"


def test_hostile_values_do_not_hang_the_redactor() -> None:
    # A hang detector, not a speed check: the limit is hundreds of times what the
    # linear scan needs, and the quadratic one needed minutes. A subprocess, so a
    # hang is killed rather than left holding the test run's GIL.
    script = (
        "from picobot.privacy.redaction import Redactor\n"
        "from tests.privacy.test_redaction import hostile_values\n"
        "for text in hostile_values(40_000):\n"
        "    assert Redactor().redact(text).endswith('[REDACTED:labelled_secret]')\n"
    )
    done = subprocess.run(  # noqa: S603 - fixed argv, our own interpreter
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


# --- JSON text: a tool call's arguments ---------------------------------------------------

# In JSON a quoted value is written \"...\" and a line break \n, which hid these secrets
# from the text rules: the tool record kept them while the memory itself was redacted.
_ESCAPED_CONTENTS = [
    ('the wifi "password": "hunter2 now"', "hunter2"),
    ("line one\npassword: hunter22\nline three", "hunter22"),
    ('db password="p@ss word"', "p@ss word"),
]


@pytest.mark.parametrize(("content", "secret"), _ESCAPED_CONTENTS)
def test_secrets_in_json_strings_are_redacted(content: str, secret: str) -> None:
    args = json.dumps({"action": "save", "key": "wifi", "content": content})
    out = redact_json(args, Redactor().redact)
    assert secret not in out
    assert json.loads(out)["content"] == Redactor().redact(content)


def test_json_redaction_keeps_clean_text_and_labels_in_keys() -> None:
    clean = '{"query":  "zebra",\n "top_k": 5}'
    assert redact_json(clean, Redactor().redact) == clean  # unchanged, byte for byte
    assert "hunter22" not in redact_json('{"password": "hunter22"}', Redactor().redact)
    assert redact_json("not json password=hunter22", Redactor().redact) == (
        "not json password=[REDACTED:labelled_secret]"
    )
    deep = "[" * 100_000 + "]" * 100_000
    assert redact_json(deep, Redactor().redact) == deep


async def test_tool_call_arguments_are_stored_without_their_secrets(tmp_path: Path) -> None:
    calls = tuple(
        ToolCall(f"c{i}", "memory", json.dumps({"action": "save", "key": f"k{i}", "content": c}))
        for i, (c, _) in enumerate(_ESCAPED_CONTENTS)
    )
    provider = ScriptedProvider([ScriptedTurn(tool_calls=calls), "saved"])
    settings = Settings(data=DataSettings(dir=str(tmp_path / "data")))
    async with open_runtime(settings, provider=provider) as rt:
        inbound = Inbound(Identity("tui", "tui:alice", "local"), "save")
        events = [event async for event in rt.kernel.handle(inbound)]
        assert events[-1].text == "saved"
        rows = await rt.db.fetchall(
            "SELECT picobot_open(arguments) AS arguments, ok FROM tool_records"
        )
    assert [r["ok"] for r in rows] == [1, 1, 1]
    for (_, secret), row in zip(_ESCAPED_CONTENTS, rows, strict=True):
        assert secret not in row["arguments"]
    raw = b"".join(p.read_bytes() for p in (tmp_path / "data").iterdir() if p.is_file())
    for _, secret in _ESCAPED_CONTENTS:
        assert secret.encode() not in raw
