"""Single-use download tokens for a user's own export (``/export`` over WebSocket).

A token is issued to the authenticated caller and names only them; it is redeemed at
most once, within ``ttl_secs`` (10 minutes), by anyone who holds it (the download needs
no API key: the token is the credential, shown only to its user). Tokens live in
memory: a restart voids them all.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

EXPORT_TOKEN_TTL_SECS = 600.0
MAX_PENDING = 1000
"""Most tokens held at once; the oldest goes first (each is a user's open download)."""


class ExportTokens:
    """Issue and redeem download tokens; see the module docstring."""

    def __init__(
        self, ttl_secs: float = EXPORT_TOKEN_TTL_SECS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_secs = ttl_secs
        self.clock = clock
        self._pending: dict[str, tuple[str, float]] = {}

    def issue(self, user_id: str) -> str:
        """A new token for ``user_id``'s export."""
        now = self.clock()
        self._pending = {t: v for t, v in self._pending.items() if v[1] > now}
        while len(self._pending) >= MAX_PENDING:
            del self._pending[next(iter(self._pending))]
        token = secrets.token_urlsafe(24)
        self._pending[token] = (user_id, now + self.ttl_secs)
        return token

    def redeem(self, token: str) -> str | None:
        """The user ``token`` was issued to, once; None when unknown, used or expired."""
        found = self._pending.pop(token, None)
        if found is None or found[1] <= self.clock():
            return None
        return found[0]
