"""Headers every response of the HTTP server carries, whatever answered it.

The dashboard's pages set their own policy (:data:`picobot.dashboard.render.SECURITY_HEADERS`);
everything else (JSON, the export download, the event stream, static files, webhook
answers, and aiohttp's own 404 and 405 pages) gets at least: ``nosniff``, no framing
(``X-Frame-Options: DENY`` and CSP ``frame-ancestors 'none'``), a CSP that lets nothing
load or run, and ``Cache-Control: no-store`` (an answer of this server is a user's data
or an operator's view of it; static files alone may be cached). ``Server`` names
PicoBot without a version, so a scan does not learn which aiohttp to attack.

It is one ``on_response_prepare`` hook rather than a middleware because aiohttp
answers a path no route matches (404) or a method no route takes (405) before any
middleware runs, and a handler's streamed response is prepared without returning
through them; the hook sees every response of the application.
"""

from __future__ import annotations

from aiohttp import web

SERVER = "PicoBot"
"""The ``Server`` header: no version (aiohttp's default names itself and Python)."""

BASELINE: dict[str, str] = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
}


async def secure_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Add the baseline headers the response does not set itself; name the server."""
    headers = response.headers
    for name, value in BASELINE.items():
        headers.setdefault(name, value)
    if not isinstance(response, web.FileResponse):
        headers.setdefault("Cache-Control", "no-store")
    headers["Server"] = SERVER


def protect_responses(app: web.Application) -> None:
    """Give every response of ``app`` the baseline headers (once, however often called).

    A request too broken to reach the application (a bad request line, a header over
    8 KiB) is answered by aiohttp itself before any hook runs, so that plain 400 keeps
    aiohttp's default ``Server`` header (aiohttp offers no public setting for it)."""
    if secure_headers not in app.on_response_prepare:
        app.on_response_prepare.append(secure_headers)
