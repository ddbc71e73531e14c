"""HTML rendering of the dashboard: the Jinja2 environment, its filters, safe headers.

Templates live in ``picobot/dashboard/templates`` (package data) and are autoescaped:
user content and model output are always text, never markup. Every page is sent with
headers that forbid framing, inline scripts and caching (:data:`SECURITY_HEADERS`).
"""

from __future__ import annotations

import datetime as dt
import re
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
