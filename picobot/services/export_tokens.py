"""Single-use download tokens for a user's own export (``/export`` over WebSocket).

A token is issued to the authenticated caller and names only them; it is redeemed at
most once, within ``ttl_secs`` (10 minutes), by anyone who holds it (the download needs
no API key: the token is the credential, shown only to its user). Tokens live in
memory: a restart voids them all.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from picobot.access.tokens import SingleUseTokens

EXPORT_TOKEN_TTL_SECS = 600.0
MAX_PENDING = 1000
"""Most tokens held at once; the oldest goes first (each is a user's open download)."""


class ExportTokens(SingleUseTokens[str]):
    """Issue and redeem download tokens; see the module docstring."""

    def __init__(
        self, ttl_secs: float = EXPORT_TOKEN_TTL_SECS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(ttl_secs, max_pending=MAX_PENDING, token_bytes=24, clock=clock)

    def redeem(self, token: str) -> str | None:
        """The user ``token`` was issued to, once; None when unknown, used or expired."""
        taken = self.take(token)
        return None if taken is None or taken.expired else taken.value
