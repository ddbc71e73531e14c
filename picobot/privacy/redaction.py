"""Secret redaction: replace credentials with typed markers before text is kept.

Every text PicoBot stores, indexes, summarizes or logs goes through
:meth:`Redactor.redact` first, so a key pasted into a chat never reaches the database,
the search index, a summary prompt or a log file. A secret becomes
``[REDACTED:<type>]``; the surrounding text (a label, a URL's user and host) stays so
the conversation still reads.

Patterns are anchored on structure a secret actually has (a vendor prefix, a PEM
header, ``scheme://user:password@host``, a ``label=value`` pair) rather than on
"looks random": bare long hex strings such as git SHAs, sha256 digests and UUIDs are
deliberately *not* redacted. Developers paste them all the time and they are almost
never credentials, so matching them would mangle ordinary chat for little gain; a hex
secret that is labelled (``secret=9f86d0...``, ``api_key: ...``) is still caught.
Likewise prose such as "my password is weak" is left alone: only the ``label: value``
and ``label=value`` forms are treated as a secret, because in prose nothing marks
which word is the value.

Order matters: PEM blocks and vendor prefixes run before the generic label rule so a
labelled OpenAI key is reported as ``openai_key``, not ``labelled_secret``. Each rule
is one compiled regex applied in one pass, and never inside an existing marker, which
keeps ``redact`` idempotent.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from picobot.errors import UNREADABLE_JSON, ConfigError

if TYPE_CHECKING:
    from picobot.config.settings import PrivacySettings

__all__ = ["BUILTIN_TYPES", "RedactingFilter", "Redactor", "marker", "redact_json"]

_CONFIG_KEY = "privacy.extra_redaction_patterns"
# Markers are never rescanned: splitting on them keeps a rule from matching across or
# inside one, which is what makes redact(redact(x)) == redact(x).
_MARKER = re.compile(r"(\[REDACTED:[a-z_]+\])")
_MARKER_PREFIX = "[REDACTED:"

# Characters that end an unquoted labelled value (whitespace, quotes, separators used
# in query strings, CSV and code, and brackets around the value).
_STOP = r"""\s'"`,;&<>()\[\]{}"""
_BARE = f"[^{_STOP}]"
_KEYWORDS = (
    r"password|passwd|passphrase|pwd(?![ \t]*[:=][ \t]*[/~])|secret|token|apikey"
    r"|(?:secret|access|api|private)[_-]?key"
)
# Unquoted values that are code or placeholders rather than secrets: literals and type
# names (`password: str`), calls and subscripts (`token = get_token()`,
# `os.environ["X"]`), attribute paths (`self.token`), variable names that repeat the
# label (`Client(api_key=api_key)`), $ENV_VARS and masks (`****`).
_NOT_A_VALUE = (
    rf"(?!(?i:none|null|nil|true|false|undefined|str|string|bytes|int|bool|optional"
    rf"|bearer|basic|required|redacted)(?!{_BARE}))"
    r"(?![A-Za-z_][A-Za-z_.]*[(\[])"
    rf"(?![A-Za-z_]+(?:\.[A-Za-z_]+)+(?!{_BARE}))"
    # One run of letters holding a keyword: found by a lookahead, then the run taken
    # whole (possessively), so a long run of keywords ("secretsecret...") is scanned
    # once rather than once per keyword in it (quadratic: 60 KB took seconds).
    rf"(?!(?i:(?=[a-z_]*?(?:password|passwd|pwd|secret|key|token))[a-z_]++)(?!{_BARE}))"
    rf"(?!\$\{{|\$[A-Z_][A-Z0-9_]*(?!{_BARE})|\*+(?!{_BARE}))"
)

# (type, pattern). A group named ``secret...`` marks the part to replace; without one
# the whole match is the secret.
_RULES: tuple[tuple[str, str], ...] = (
    (
        "private_key",
        # A whole PEM block (or an armored OpenPGP "PRIVATE KEY BLOCK"); if the END
        # line is missing (a truncated paste), the header plus the header lines and
        # base64 lines after it. The body scan stops (possessively) at the next "-----",
        # so many unterminated headers cost linear, not quadratic, time.
        r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:(?:[^-]++|-(?!----))*+-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
        r"|(?:\s*(?:Proc-Type|DEK-Info|Version|Comment|Hash|Charset):[^\r\n]*)*"
        r"(?:\s*[A-Za-z0-9+/=]{20,}(?:\s+[A-Za-z0-9+/=]{20,})*(?:\s+[A-Za-z0-9+/]{1,19}={1,2})?)?)",
    ),
    ("anthropic_key", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
    ("openai_key", r"\bsk-(?:(?:proj|svcacct|admin)-)?[A-Za-z0-9][A-Za-z0-9_-]{19,}"),
    ("stripe_key", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})"),
    ("slack_token", r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    (
        "slack_token",
        r"\bhttps?://hooks\.slack\.com/services/(?P<secret>[A-Za-z0-9][A-Za-z0-9_/-]*)",
    ),
    ("aws_access_key", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    (
        # Only when labelled: a bare 40-character base64 string is far too common.
        "aws_secret_key",
        r"(?<![A-Za-z0-9])(?i:aws_?secret_?(?:access_?)?key)[\"']?[ \t]*[:=][ \t]*[\"']?"
        r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
    ),
    ("google_api_key", r"\bAIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])"),
    (
        # Starts only where a base64url run starts, so a long run of "eyJ..-eyJ.." is
        # scanned once rather than once per "eyJ" (quadratic).
        "jwt",
        r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}+\.eyJ[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]*",
    ),
    (
        # RFC 6750 token characters; the token must hold a digit, a symbol or a
        # lower-to-upper case change, so "Bearer authentication." stays prose.
        "bearer_token",
        r"\b(?i:bearer)[ \t]+(?=[A-Za-z.~-]*(?:[0-9_+/=]|[a-z][A-Z]))"
        r"(?P<secret>[A-Za-z0-9._~+/-]{12,}=*)",
    ),
    (
        # Keep scheme, user and host; the password is everything up to the last '@'
        # of the authority, so an unencoded '@' in the password is still covered.
        "url_password",
        r"\b[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s:/@\[\]]{0,256}:"
        r"(?P<secret>[^\s/]{1,256})@(?=[A-Za-z0-9\[])",
    ),
    (
        # label (optionally quoted, camelCase or with a prefix such as DB_ or X-Api-)
        # then ':' '=' or '=>', then a quoted or bare value; only the value goes.
        "labelled_secret",
        rf"(?:(?<![A-Za-z0-9])|(?<=[a-z])(?=[A-Z]))(?i:{_KEYWORDS})(?![A-Za-z0-9_])"
        r"[\"'`*]{0,2}[ \t]*(?:=>|[:=](?![=:>]))[ \t]*"
        r"(?:\"(?P<secret_dq>[^\"\r\n]{1,512})\"|'(?P<secret_sq>[^'\r\n]{1,512})'"
        rf"|{_NOT_A_VALUE}(?P<secret_bare>{_BARE}{{4,}}))",
    ),
)

BUILTIN_TYPES: frozenset[str] = frozenset(kind for kind, _ in _RULES) | {"custom"}
"""Every ``<type>`` a marker may carry."""


def marker(kind: str) -> str:
    """The text that replaces a secret of type ``kind``."""
    return f"[REDACTED:{kind}]"


_Replacer = Callable[[re.Match[str]], str]


def _replacer(kind: str) -> _Replacer:
    """Build the re.sub callback that swaps a match's secret part for the marker."""
    text = marker(kind)

    def replace(match: re.Match[str]) -> str:
        whole = match.group()
        if not whole:
            return ""  # an empty match (possible in custom patterns) hides nothing
        for name, value in match.groupdict().items():
            if value is not None and name.startswith("secret"):
                start, end = match.span(name)
                offset = match.start()
                return whole[: start - offset] + text + whole[end - offset :]
        return text

    return replace


def _sub_outside_markers(pattern: re.Pattern[str], replace: _Replacer, text: str) -> str:
    """Apply one rule to the text between markers, leaving markers untouched."""
    if _MARKER_PREFIX not in text:
        return pattern.sub(replace, text)
    parts = _MARKER.split(text)
    # split() with one capturing group alternates text, marker, text, ...
    for i in range(0, len(parts), 2):
        if parts[i]:
            parts[i] = pattern.sub(replace, parts[i])
    return "".join(parts)


_MAX_PASSES = 8
"""Bound on the passes of :meth:`Redactor.redact` (each one only adds markers)."""

# A cheap necessary condition per rule, in _RULES order: text the rule can match holds
# one of these literals (case-sensitive), or matches this case-insensitive regex (the
# same case rules as the pattern's (?i:...), e.g. the Kelvin sign is a "k"). Chat text
# without any of them skips the rule's regex: most messages hold no secret.
_HINTS: tuple[tuple[str, ...] | re.Pattern[str], ...] = (
    ("-----BEGIN",),
    ("sk-ant-",),
    ("sk-",),
    ("k_live_", "k_test_"),
    ("gh", "github_pat_"),
    ("xox",),
    ("hooks.slack.com",),
    ("AKIA", "ASIA"),
    re.compile("aws", re.IGNORECASE),
    ("AIza",),
    ("eyJ",),
    re.compile("bearer", re.IGNORECASE),
    ("://",),
    # Every keyword of _KEYWORDS holds one of these.
    re.compile("pass|pwd|secret|token|key", re.IGNORECASE),
)
assert len(_HINTS) == len(_RULES)

_Rule = tuple[re.Pattern[str], _Replacer, tuple[str, ...] | re.Pattern[str] | None]


def _may_match(hint: tuple[str, ...] | re.Pattern[str] | None, text: str) -> bool:
    if hint is None:
        return True
    if isinstance(hint, tuple):
        return any(literal in text for literal in hint)
    return hint.search(text) is not None


_BUILTIN: tuple[_Rule, ...] = tuple(
    (re.compile(source), _replacer(kind), hint)
    for (kind, source), hint in zip(_RULES, _HINTS, strict=True)
)


class Redactor:
    """Replaces secrets in text with ``[REDACTED:<type>]`` markers.

    ``extra_patterns`` are regular expressions whose matches become
    ``[REDACTED:custom]``; they run after the built-in rules. An invalid pattern, or
    one that matches empty text, raises :class:`ConfigError` naming
    ``privacy.extra_redaction_patterns`` and the pattern (even when ``enabled`` is
    false, so a broken config fails loudly). With ``enabled=False`` :meth:`redact`
    returns its input unchanged.
    """

    def __init__(self, extra_patterns: Sequence[str] = (), *, enabled: bool = True) -> None:
        self.enabled = enabled
        custom = _replacer("custom")
        extra: list[_Rule] = []
        for source in extra_patterns:
            try:
                compiled = re.compile(source)
            except re.error as exc:
                raise ConfigError(
                    "invalid configuration",
                    [f"{_CONFIG_KEY}: invalid regular expression {source!r}: {exc}"],
                ) from None
            if compiled.fullmatch("") is not None:
                raise ConfigError(
                    "invalid configuration",
                    [f"{_CONFIG_KEY}: pattern {source!r} matches empty text"],
                )
            extra.append((compiled, custom, None))
        self._rules = _BUILTIN + tuple(extra)

    @classmethod
    def from_settings(cls, settings: PrivacySettings) -> Redactor:
        """Build the redactor described by the ``[privacy]`` config section."""
        return cls(settings.extra_redaction_patterns, enabled=settings.redact_secrets)

    def redact(self, text: str) -> str:
        """Return ``text`` with every secret replaced by its typed marker."""
        if not self.enabled or not text:
            return text
        # A marker can expose a secret that an earlier rule did not see: in
        # "EMP-0sk-proj-..." the key has no word boundary until a custom rule turns
        # "EMP-0" into a marker. So the rules run again until nothing changes (usually
        # one pass: text without secrets is left as it was).
        for _ in range(_MAX_PASSES):
            before = text
            for pattern, replace, hint in self._rules:
                if _may_match(hint, text):
                    text = _sub_outside_markers(pattern, replace, text)
            if text == before:
                break
        return text


def redact_json(text: str, redact: Callable[[str], str]) -> str:
    """``text`` (a tool call's JSON arguments, say) with the secrets in it redacted.

    JSON escapes hide secrets from the text rules: a quoted value is written ``\\"...\\"``
    and a line break ``\\n``, so neither ``"password": "x"`` nor a ``password: x`` line
    inside a JSON string looks like one. So each string of the document (keys too) is
    redacted on its own and, only if one changed, the document is written out again;
    the result is then redacted as text as well (for a label that is a key, with its
    value). Text that is not JSON is redacted as text.
    """
    try:
        doc = json.loads(text)
        cleaned = _redact_strings(doc, redact)
    except UNREADABLE_JSON:
        return redact(text)
    if cleaned != doc:
        text = json.dumps(cleaned, ensure_ascii=False)
    return redact(text)


def _redact_strings(value: object, redact: Callable[[str], str]) -> object:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redact_strings(item, redact) for item in value]
    if isinstance(value, dict):
        return {redact(key): _redact_strings(item, redact) for key, item in value.items()}
    return value


# Used only to render tracebacks so they can be redacted before any handler sees them.
_TRACEBACK_FORMATTER = logging.Formatter()


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's message, traceback and stack.

    The message is formatted (``msg % args``), redacted and stored back with the args
    cleared, so no handler or formatter can reintroduce a secret from the args. Attach
    it to handlers, not loggers: a logger's filters do not see records propagated
    from its children. A traceback is rendered here with the standard formatter (a
    handler's custom ``formatException`` is bypassed) so that it can be redacted too.
    """

    def __init__(self, redactor: Redactor | None = None, name: str = "") -> None:
        super().__init__(name)
        self.redactor = redactor if redactor is not None else Redactor()

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record`` in place; never drops a record."""
        if not self.redactor.enabled:
            return True
        try:
            message = record.getMessage()
        except Exception:
            # A msg/args mismatch: leave the record so logging reports it as usual.
            return True
        record.msg = self.redactor.redact(message)
        record.args = ()
        if record.exc_info and not record.exc_text:
            record.exc_text = _TRACEBACK_FORMATTER.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor.redact(record.stack_info)
        return True
