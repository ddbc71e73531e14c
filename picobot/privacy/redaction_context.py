"""The redaction rules that read context, and how they judge the value they find.

A vendor format (:mod:`picobot.privacy.redaction_rules`) is a secret wherever it
appears; these rules instead find a value by what surrounds it: a ``Bearer`` or
``Authorization:`` header, the password slot of a URL, a ``password``/``secret``/
``token``/``api_key`` label (also as an XML element, or in a ``.netrc``). The value is
then judged, as a regular expression cannot:

- a placeholder stays (:func:`is_placeholder`): type names and literals (``string``,
  ``null``), state words (``expired``), YAML tags (``!Ref``), template references
  (``<password>``, ``${DB_PASSWORD}``, ``{{ x }}``), ``your-password``/``..._here``, a
  word holding a keyword (``YOUR_API_KEY``), masks (``xxx``, ``****``), elided examples
  (``sk-...``) and where a secret is kept (``~/.ssh/id_ed25519``);
- after ``label:`` and a space, an unquoted plain word that reads as prose stays
  (:func:`reads_as_prose`): ``Secret: Santa``, ``Password: minimum twelve characters``;
- after ``passphrase``, the value is the rest of the line, since a passphrase is words.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from picobot.privacy.redaction_rules import Rule

__all__ = ["CONTEXT_RULES", "Accept", "is_masked", "is_placeholder", "reads_as_prose"]

Accept = Callable[[re.Match[str], str], bool]
"""Whether to redact a match whose secret part is the given text."""

# Characters that end an unquoted labelled value (whitespace, quotes, separators used
# in query strings, CSV and code, and brackets around the value).
_STOP = r"""\s'"`,;&<>()\[\]{}"""
_BARE = f"[^{_STOP}]"
# An unquoted value runs on through a '&' unless the '&' starts the next query
# parameter: "token=ab12&page=2" but "DB_PASSWORD=Tr0ub4dor&3".
_VALUE_CHAR = rf"(?:{_BARE}|&(?![A-Za-z_][A-Za-z0-9_.-]*=))"
# Where a label starts: not inside a word, at a camelCase hump (clientSecret), or after
# an upper-case prefix glued to an upper-case keyword (PGPASSWORD, APPSECRET).
_LABEL_START = (
    r"(?:(?<![A-Za-z0-9])|(?<=[a-z])(?=[A-Z])"
    r"|(?<=[A-Z])(?=PASSWORD|PASSWD|PASSPHRASE|SECRET|TOKEN))"
)
# "pass" is a label as pass/Pass or DB_PASS, not as PASS (test runners print "PASS:").
_KEYWORDS = (
    r"(?:(?i:password|passwd|pwd(?![ \t]*[:=][ \t]*[/~])|pw|token|apikey"
    r"|secret(?:[ _-]?key(?:[_-]?base)?)?|(?:access|api|private)[ _-]?key)"
    r"|pass|Pass|(?<=_)PASS)"
)
# Separator: optional closing quote or markdown bold, then ':' '=' or '=>'.
_SEPARATOR = r"[\"'`*]{0,2}[ \t]*(?P<sep>=>|[:=](?![=:>]))(?P<gap>[ \t]*)"
_QUOTED = r"\"(?P<secret_dq>[^\"\r\n]{1,512})\"|'(?P<secret_sq>[^'\r\n]{1,512})'"
# Unquoted values that are code rather than secrets: literals and type names
# (`password: str`, also as the start of a passphrase's line), calls and subscripts
# (`token = get_token()`, `os.environ["X"]`), attribute paths (`self.token`), `await` or
# `new` expressions, and ${VAR} / $VAR references. Placeholders are told apart after
# the match (is_placeholder), for quoted values too.
_LITERALS = (
    "none|null|nil|true|false|undefined|str|string|bytes|int|bool|optional|required"
    "|redacted|hidden|example|placeholder|dummy|bearer|basic"
)
# Words that tell a secret's state rather than being one ("token: expired").
_STATES = (
    "expired|revoked|rotated|invalid|valid|incorrect|wrong|missing|unset|empty|pending"
    "|unknown|disabled|enabled|forgotten|changed|todo|tbd"
)
_NOT_A_VALUE = (
    rf"(?!(?i:{_LITERALS})(?!{_BARE}))"
    r"(?![A-Za-z_][A-Za-z_.]*[(\[])"
    rf"(?![A-Za-z_]+(?:\.[A-Za-z_]+)+(?!{_BARE}))"
    r"(?!(?:await|new|yield)[ \t])"
    rf"(?!\$\{{|\$[A-Z_][A-Z0-9_]*(?!{_BARE}))"
)

# Placeholders: type names and literals, state words, YAML tags, template references,
# "your-..."/"..._here", masks (`xxx`, `****`); and where a secret is kept rather than
# the secret: a relative or home path, an absolute one under a system directory, an SSH
# key's file name (a secret may well start with "/", as base64 does one time in 64).
_PLACEHOLDER = re.compile(
    rf"(?i:{_LITERALS}|{_STATES})|![A-Za-z]+"  # !Ref, !vault: a YAML tag, the value follows
    r"|(?:~|\.\.?)/\S*|/(?:etc|home|run|var|usr|tmp|opt|root|srv|mnt|Users)/\S*"
    r"|id_(?:rsa|dsa|ecdsa|ed25519)(?:\.pub)?"
    # Environment variables are upper-case: "$uperSecret1" is a password.
    r"|<[^<>]*>|\{[^{}]*\}|\{\{.*\}\}|\$\{.*\}|\$\(.*\)|\$[A-Z_][A-Z0-9_]*|%[A-Z_][A-Z0-9_]*%"
    r"|(?i:your[ _-]?[a-z0-9 _.-]*|[a-z0-9 _-]*[_-]here)"
    r"|[-_. ]*(?:[xX][-_. ]*){3,}|[-_. ]*(?:[*#\u2022][-_. ]*){3,}"
)
# A word holding a keyword (`YOUR_API_KEY`, `mysecretpassword`): two linear scans, as
# one regex would rescan a long run of letters from every keyword in it.
_WORD = re.compile(r"[A-Za-z_]+")
_KEYWORD = re.compile(r"pass|pwd|secret|key|token", re.IGNORECASE)
# A run of mask characters or an ellipsis anywhere: a redacted or elided example
# (`ghp_xxxxxxxx...`, `sk-...`), never a live credential.
_MASKED = re.compile(r"x{5}|X{5}|\*{5}|\.\.\.|\u2026")
_MORE_WORDS = re.compile(r"[,;:.!?]?[ \t]+[A-Za-z0-9]")


def is_masked(secret: str) -> bool:
    """Whether ``secret`` holds a mask run or an ellipsis: an example, not a credential."""
    return _MASKED.search(secret) is not None


def is_placeholder(value: str) -> bool:
    """Whether a value found after a label, a header or in a URL stands in for a secret
    (or tells where one is) rather than being one."""
    if is_masked(value) or _PLACEHOLDER.fullmatch(value) is not None:
        return True
    return _WORD.fullmatch(value) is not None and _KEYWORD.search(value) is not None


def reads_as_prose(value: str, after: str) -> bool:
    """Whether a ``label: value`` value (unquoted, after a colon and a space) is prose.

    Only a plain word (letters only) can be: a capitalized one reads as a title or a
    name ("Secret: Santa"), and one followed by more words on its line starts a sentence
    ("Password: minimum twelve characters"). A lone lower-case word ("password: weak")
    or anything holding a digit or a symbol stays a value.
    """
    if not value.isalpha():
        return False
    if value[0].isupper() and value[1:].islower():
        return True
    return _MORE_WORDS.match(after) is not None


def _accept_value(match: re.Match[str], secret: str) -> bool:
    return not is_placeholder(secret)


def _accept_labelled(match: re.Match[str], secret: str) -> bool:
    if is_placeholder(secret):
        return False
    if match.group("secret_bare") is None or match.group("sep") != ":" or not match["gap"]:
        return True
    return not reads_as_prose(secret, match.string[match.end() : match.end() + 8])


CONTEXT_RULES: tuple[tuple[Rule, Accept], ...] = (
    (
        Rule(
            # RFC 6750 token characters; the token must hold a digit, a symbol or a
            # lower-to-upper case change, so "Bearer authentication." stays prose.
            "bearer_token",
            r"\b(?i:bearer)[ \t]+(?=[A-Za-z.~-]*(?:[0-9_+/=]|[a-z][A-Z]))"
            r"(?P<secret>[A-Za-z0-9._~+/-]{12,}+=*)",
            ("bearer",),
            "the token after `Bearer `",
            hint_ignorecase=True,
        ),
        _accept_value,
    ),
    (
        Rule(
            # Any other scheme (Basic, Token, Bot, ...) or none; the credentials must
            # hold a digit, a symbol or a case change, like a bearer token.
            "auth_header",
            r"(?<![A-Za-z0-9-])(?i:(?:proxy-)?authorization)[\"']?[ \t]*[:=][ \t]*[\"']?"
            r"(?:(?!(?i:bearer)[ \t])[A-Za-z][A-Za-z0-9_-]{1,20}[ \t]+)?"
            r"(?=[A-Za-z.~-]*(?:[0-9_+/=:]|[a-z][A-Z]))(?P<secret>[A-Za-z0-9._~+/:=-]{8,}+)",
            ("authorization",),
            "the credentials of an `Authorization:` header",
            hint_ignorecase=True,
        ),
        _accept_value,
    ),
    (
        Rule(
            # Keep scheme, user and host; the password runs to the last '@' before the
            # end of the URL, so an unencoded '@' or '/' in it is still covered. A
            # "host:port/" is not a user and a password.
            "url_password",
            r"\b[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s:/@\[\]]{0,256}:(?!\d{1,5}(?:/|$))"
            r"(?P<secret>[^\s\"'<>`]{1,256})@(?=[A-Za-z0-9\[])",
            ("://",),
            "the password of `scheme://user:password@host`",
        ),
        _accept_value,
    ),
    (
        Rule(
            # An XML element named like a label (Maven's settings.xml, Spring beans):
            # <password>...</password>, <db.password>...</db.password>.
            "labelled_secret",
            rf"<[A-Za-z0-9_.:-]{{0,40}}?{_KEYWORDS}>(?P<secret>[^<\r\n]{{1,512}}+)</",
            ("</",),
            "the text of an XML element such as `<password>`",
        ),
        _accept_value,
    ),
    (
        Rule(
            # A .netrc entry: "machine HOST login USER password SECRET", on one line or
            # several.
            "labelled_secret",
            r"\b(?:machine\s++\S++|default)(?:\s++(?:login|account|port)\s++\S++)*+"
            r"\s++password\s++(?P<secret>\S++)",
            ("password",),
            "the password of a `.netrc` entry",
        ),
        _accept_value,
    ),
    (
        Rule(
            # A passphrase is several words: the whole rest of the line is the value.
            "labelled_secret",
            rf"{_LABEL_START}(?i:passphrase)(?![A-Za-z0-9_]){_SEPARATOR}"
            rf"(?:{_QUOTED}|{_NOT_A_VALUE}(?P<secret_bare>{_BARE}[^\r\n]{{0,511}}(?<!\s)))",
            ("passphrase",),
            "the rest of the line after `passphrase:` or `passphrase=`",
            hint_ignorecase=True,
        ),
        _accept_value,
    ),
    (
        Rule(
            # label (optionally quoted, camelCase or with a prefix such as DB_ or X-Api-)
            # then ':' '=' or '=>', then a quoted or bare value; only the value goes.
            "labelled_secret",
            rf"{_LABEL_START}{_KEYWORDS}(?![A-Za-z0-9_]){_SEPARATOR}"
            rf"(?:{_QUOTED}|{_NOT_A_VALUE}(?P<secret_bare>{_VALUE_CHAR}{{4,}}+))",
            # Every keyword of _KEYWORDS holds one of these.
            ("pass", "pw", "secret", "token", "key"),
            "the value after a `password`, `secret`, `token`, `api_key`... label",
            hint_ignorecase=True,
        ),
        _accept_labelled,
    ),
)
