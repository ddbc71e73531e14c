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
which word is the value. Even then a value that is a placeholder (``"string"``,
``<password>``, ``xxx``) or that reads as prose (``Password: minimum twelve
characters``, ``Secret: Santa``) stays: see :mod:`picobot.privacy.redaction_context`.

Order matters: PEM blocks and vendor formats (data, in
:mod:`picobot.privacy.redaction_rules`) run before the rules that read a label, a
header or a URL, so a labelled OpenAI key is reported as ``openai_key``, not
``labelled_secret``. Each rule is one compiled regex applied in one pass, and never
inside an existing marker, which keeps ``redact`` idempotent.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from picobot.errors import ConfigError
from picobot.privacy.redaction_context import CONTEXT_RULES, Accept, is_masked
from picobot.privacy.redaction_rules import TOKEN_RULES, Rule

if TYPE_CHECKING:
    from picobot.config.settings import PrivacySettings

__all__ = ["BUILTIN_TYPES", "RedactingFilter", "Redactor", "marker"]

_CONFIG_KEY = "privacy.extra_redaction_patterns"
# Markers are never rescanned: splitting on them keeps a rule from matching across or
# inside one, which is what makes redact(redact(x)) == redact(x).
_MARKER = re.compile(r"(\[REDACTED:[a-z_]+\])")
_MARKER_PREFIX = "[REDACTED:"

_Replacer = Callable[[re.Match[str]], str]
_Hint = tuple[str, ...] | re.Pattern[str]
_Rule = tuple[re.Pattern[str], _Replacer, _Hint | None]


def _accept_token(rule: Rule) -> Accept | None:
    """A vendor format's match is redacted unless it is an example or fails its check."""
    check, examples_stay = rule.check, rule.examples_stay
    if check is None and not examples_stay:
        return None

    def accept(_match: re.Match[str], secret: str) -> bool:
        if examples_stay and is_masked(secret):
            return False
        return check is None or check(secret)

    return accept


# (rule, accept) in the order they run: PEM blocks and vendor formats, then the rules
# that read a label, a header or a URL.
_ALL: tuple[tuple[Rule, Accept | None], ...] = (
    tuple((rule, _accept_token(rule)) for rule in TOKEN_RULES) + CONTEXT_RULES
)

BUILTIN_TYPES: frozenset[str] = frozenset(rule.kind for rule, _ in _ALL) | {"custom"}
"""Every ``<type>`` a marker may carry."""


def marker(kind: str) -> str:
    """The text that replaces a secret of type ``kind``."""
    return f"[REDACTED:{kind}]"


def _replacer(kind: str, accept: Accept | None = None) -> _Replacer:
    """Build the re.sub callback that swaps a match's secret part for the marker.

    A group named ``secret...`` marks the part to replace; without one the whole match
    is the secret. A match ``accept`` rejects is left as it is.
    """
    text = marker(kind)

    def replace(match: re.Match[str]) -> str:
        whole = match.group()
        if not whole:
            return ""  # an empty match (possible in custom patterns) hides nothing
        start, end = match.span()
        for name, value in match.groupdict().items():
            if value is not None and name.startswith("secret"):
                start, end = match.span(name)
                break
        if accept is not None and not accept(match, match.string[start:end]):
            return whole
        offset = match.start()
        return whole[: start - offset] + text + whole[end - offset :]

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


def _any_word(words: Sequence[str]) -> re.Pattern[str]:
    """A case-insensitive regex for any of ``words``, written to start with a class of
    their first letters (``[ap](?:(?<=a)ws|(?<=p)(?:ass|w))``): the regex engine scans
    for a class quickly, but tries a case-insensitive alternation at every position."""
    rests: dict[str, list[str]] = {}
    for word in words:
        rests.setdefault(word[0].lower(), []).append(re.escape(word[1:]))
    heads = "".join(map(re.escape, rests))
    tails = "|".join(f"(?<={re.escape(c)})(?:{'|'.join(rest)})" for c, rest in rests.items())
    return re.compile(f"[{heads}](?:{tails})", re.IGNORECASE)


def _hint(rule: Rule) -> _Hint:
    """A cheap necessary condition of the rule: text it can match holds one of the
    literals (case-sensitive), or matches the case-insensitive regex (the same case
    rules as the pattern's (?i:...), e.g. the Kelvin sign is a "k"). Chat text without
    it skips the rule's regex: most messages hold no secret."""
    if rule.hint_ignorecase:
        return _any_word(rule.hints)
    return rule.hints


def _may_match(hint: _Hint | None, text: str) -> bool:
    if hint is None:
        return True
    if isinstance(hint, tuple):
        return any(literal in text for literal in hint)
    return hint.search(text) is not None


_BUILTIN: tuple[_Rule, ...] = tuple(
    (re.compile(rule.pattern), _replacer(rule.kind, accept), _hint(rule)) for rule, accept in _ALL
)


# The hints of all built-in rules at once: one scan tells whether any literal is in the
# text (usually none is) and one whether any case-insensitive hint matches.
def _index_hints() -> tuple[dict[str, list[int]], list[tuple[int, re.Pattern[str]]]]:
    by_literal: dict[str, list[int]] = {}
    caseless: list[tuple[int, re.Pattern[str]]] = []
    for index, rule in enumerate(_BUILTIN):
        hint = rule[2]
        if isinstance(hint, tuple):
            for literal in hint:
                by_literal.setdefault(literal, []).append(index)
        elif hint is not None:
            caseless.append((index, hint))
    return by_literal, caseless


_BY_LITERAL, _CASELESS = _index_hints()
_ANY_LITERAL = re.compile("|".join(map(re.escape, _BY_LITERAL)))
_ANY_CASELESS = _any_word(
    [word for index, _ in _CASELESS for word in _ALL[index][0].hints],
)


def _candidates(text: str) -> list[int]:
    """The indexes of the built-in rules :func:`_may_match` lets run on ``text``, in
    order, found without testing every rule's hint one by one."""
    found: set[int] = set()
    if _ANY_LITERAL.search(text) is not None:
        for literal, indexes in _BY_LITERAL.items():
            if literal in text:
                found.update(indexes)
    if _ANY_CASELESS.search(text) is not None:
        found.update(index for index, hint in _CASELESS if hint.search(text) is not None)
    return sorted(found)


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
        self._extra = tuple(extra)

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
        # one pass: text without secrets is left as it was). The hints are checked once a
        # pass, on the text between markers (a marker's own name holds hint words such
        # as "key"): a rule never matches across a marker, and replacing a secret only
        # cuts the text between markers into parts of what it was, so a hint that fails
        # at the start of a pass fails for the rest of it.
        for _ in range(_MAX_PASSES):
            before = text
            visible = _MARKER.sub("\n", text) if _MARKER_PREFIX in text else text
            for index in _candidates(visible):
                pattern, replace, _ = _BUILTIN[index]
                text = _sub_outside_markers(pattern, replace, text)
            for pattern, replace, _ in self._extra:
                text = _sub_outside_markers(pattern, replace, text)
            if text == before:
                break
        return text


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
