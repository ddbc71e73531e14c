"""HTML rendering of the dashboard: the Jinja2 environment, its filters, safe headers.

Templates live in ``picobot/dashboard/templates`` (package data) and are autoescaped:
user content and model output are always text, never markup. Identifiers (user, chat
and session ids, memory keys) go through ``|ident``, which shows invisible and
direction-changing characters as marked ``\\uXXXX`` escapes. Every page is sent with
headers that forbid framing, inline scripts and caching (:data:`SECURITY_HEADERS`).
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
from aiohttp import web
from markupsafe import Markup, escape

SECURITY_HEADERS: Mapping[str, str] = {
    # Scripts and styles only from the package's own static files: no inline script,
    # no eval, so an injected attribute or tag has nothing to run.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
        " connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # "same-origin", not "no-referrer": under no-referrer the browser sends
    # "Origin: null" with its own form posts, which the origin check must refuse.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def when(ts: float | None) -> str:
    """A UTC timestamp as ``YYYY-MM-DD HH:MM:SS`` (``-`` for None)."""
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def highlight(text: str, terms: Sequence[str]) -> Markup:
    """``text`` escaped, with every case-insensitive occurrence of a term in ``<mark>``."""
    words = sorted({t for t in terms if t}, key=len, reverse=True)
    if not words:
        return escape(text)
    pattern = re.compile("|".join(re.escape(w) for w in words), re.IGNORECASE)
    out: list[str] = []
    last = 0
    for match in pattern.finditer(text):
        out.append(str(escape(text[last : match.start()])))
        out.append(f"<mark>{escape(match.group(0))}</mark>")
        last = match.end()
    out.append(str(escape(text[last:])))
    return Markup("".join(out))  # noqa: S704 - every piece was escaped above


_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
# Letters and marks that draw nothing: Hangul fillers, the combining grapheme joiner.
_BLANK = frozenset("\u034f\u115f\u1160\u3164\uffa0")


def hidden(char: str) -> bool:
    """Whether ``char`` draws nothing or moves other text: controls, format characters
    (bidi overrides and isolates U+202A-202E and U+2066-2069, zero-width U+200B-200F,
    U+FEFF...), separators and spaces other than the plain one, unassigned and private
    code points, blank letters."""
    if char == " ":
        return False
    return char in _BLANK or unicodedata.category(char) in _HIDDEN_CATEGORIES


def _code(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04X}" if code < 0x10000 else f"\\U{code:08X}"


def ident_text(value: object) -> str:
    """An identifier as plain text with each :func:`hidden` character written as
    ``\\uXXXX`` (for attributes and titles, where markup cannot go)."""
    return "".join(_code(c) if hidden(c) else c for c in str(value))


def ident(value: object) -> Markup:
    """An identifier (user, chat or session id, memory key...) for display: escaped,
    each :func:`hidden` character shown as ``\\uXXXX`` in a marked ``<span
    class="hidden-char">`` naming it, so ``generic:\\u202enimda`` cannot pass for
    ``generic:admin`` and two ids that look alike can be told apart."""
    out: list[str] = []
    for char in str(value):
        if hidden(char):
            name = unicodedata.name(char, "unnamed character")
            label = f"U+{ord(char):04X} {name}"
            out.append(f'<span class="hidden-char" title="{escape(label)}">{_code(char)}</span>')
        else:
            out.append(str(escape(char)))
    return Markup("".join(out))  # noqa: S704 - every piece was escaped above


def make_environment() -> jinja2.Environment:
    """The template environment: package templates, autoescape on, undefined is an error."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("picobot.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    env.filters["highlight"] = highlight
    env.filters["ident"] = ident
    env.filters["ident_text"] = ident_text
    return env


def html_response(
    body: str, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """An HTML page with the security headers."""
    response = web.Response(text=body, status=status, content_type="text/html", charset="utf-8")
    response.headers.update(SECURITY_HEADERS)
    response.headers.update(headers or {})
    return response


def see_other(location: str) -> web.Response:
    """A 303 redirect to ``location``, a path of this site; anything else (another
    site, a line break that would split the header) goes to the overview instead."""
    if not (
        location.startswith("/")
        and not location.startswith("//")
        and location.isascii()
        and location.isprintable()
        and "\\" not in location
    ):
        location = "/admin/"
    return html_response("", 303, {"Location": location})


class Renderer:
    """Renders templates with the values every page needs (the login's CSRF token...)."""

    def __init__(self) -> None:
        self._env = make_environment()

    def text(self, name: str, values: Mapping[str, Any]) -> str:
        """The rendered text of template ``name``."""
        return self._env.get_template(name).render(**values)

    def page(
        self,
        name: str,
        values: Mapping[str, Any],
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> web.Response:
        """Template ``name`` as an HTML response."""
        return html_response(self.text(name, values), status, headers)
