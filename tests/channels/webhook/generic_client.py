"""The client side of the generic webhook's signing, for every test that needs it.

What an integration does to post a message (:func:`signed_headers`) and to check a
callback from PicoBot (:func:`callback_ok`), in one place, so a change of the scheme
changes one helper and every test follows.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from picobot.channels.webhook.platforms.generic import sign

SECRET = "test-secret"
SIGNATURE_HEADER = "X-PicoBot-Signature"
TIMESTAMP_HEADER = "X-PicoBot-Timestamp"


def signed_headers(
    body: bytes,
    *,
    secret: str = SECRET,
    timestamp: float | str | None = None,
    legacy: bool = False,
) -> dict[str, str]:
    """The headers of a signed generic webhook request carrying ``body``.

    ``timestamp`` defaults to now; ``legacy`` signs the body alone and sends no
    timestamp (accepted only with ``require_timestamp = false``).
    """
    headers = {"Content-Type": "application/json"}
    if legacy:
        headers[SIGNATURE_HEADER] = sign(secret.encode(), body)
        return headers
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    if isinstance(timestamp, float):
        stamp = str(int(timestamp))
    headers[TIMESTAMP_HEADER] = stamp
    headers[SIGNATURE_HEADER] = sign(secret.encode(), body, stamp)
    return headers


def callback_ok(headers: Mapping[str, str], body: bytes, *, secret: str = SECRET) -> bool:
    """Whether a callback from PicoBot carries a valid timestamped signature."""
    stamp = headers.get(TIMESTAMP_HEADER)
    if stamp is None:
        return False
    return headers.get(SIGNATURE_HEADER) == sign(secret.encode(), body, stamp)
