"""Dashboard logins: server-side sessions behind an opaque cookie, and their CSRF tokens.

A login with an admin key creates a :class:`Login` held in memory only. The browser
gets a random token in an HttpOnly, SameSite=Strict cookie (Secure over TLS); the store
keys logins by the token's SHA-256, never by the token or the admin key, so neither is
ever kept. A login ends on logout, after ``idle_secs`` without a request of the
operator's (a listing's automatic refresh does not count) or ``max_secs`` after it
began; a restart ends them all. Each login has its own CSRF token
that every state-changing request must echo (:meth:`Login.csrf_ok`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from picobot.privacy.scopes import Actor

COOKIE = "picobot_dashboard"
COOKIE_PATH = "/admin/"
MAX_LOGINS_PER_KEY = 20
"""Logins one operator (admin key) holds at once by default; past it, that operator's
oldest login ends. Other operators' logins are never ended to make room, and memory
stays bounded by the number of keys times this."""


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(slots=True)
class Login:
    """One operator's login: who, its CSRF token, and when it ends."""

    actor: Actor
    csrf: str
    started_at: float
    last_seen: float
    ended: bool = field(default=False)

    def csrf_ok(self, presented: str | None) -> bool:
        """Whether ``presented`` is this login's CSRF token (constant-time)."""
        if not presented:
            return False
        return hmac.compare_digest(presented.encode("utf-8", "surrogateescape"), self.csrf.encode())


class LoginStore:
    """The logins of this process, keyed by the SHA-256 of their cookie token."""

    def __init__(
        self,
        *,
        idle_secs: float,
        max_secs: float,
        clock: Callable[[], float] = time.monotonic,
        per_operator: int = MAX_LOGINS_PER_KEY,
    ) -> None:
        self._idle = idle_secs
        self._max = max_secs
        self._per_operator = per_operator
        self._clock = clock
        self._logins: dict[str, Login] = {}

    @property
    def max_secs(self) -> float:
        """How long a login lasts at most (the cookie's Max-Age)."""
        return self._max

    def __len__(self) -> int:
        self._expire()
        return len(self._logins)

    def create(self, actor: Actor) -> tuple[str, Login]:
        """A new login of ``actor``; returns the cookie token (shown once) and the login.

        When ``actor`` already holds ``per_operator`` logins, its oldest ends: a flood of
        logins with one key (a script, a leaked key) logs out only that key's browsers."""
        self._expire()
        own = [key for key, login in self._logins.items() if login.actor.id == actor.id]
        for key in own[: max(0, len(own) - self._per_operator + 1)]:
            self._logins.pop(key).ended = True
        token = secrets.token_urlsafe(32)
        now = self._clock()
        login = Login(actor, secrets.token_urlsafe(32), now, now)
        self._logins[_digest(token)] = login
        return token, login

    def get(self, token: str | None, *, touch: bool = True) -> Login | None:
        """The live login of a cookie token, or None; ``touch`` refreshes its idle time
        (False for requests a page makes by itself, such as polling, so that an
        unattended open tab still reaches the idle limit)."""
        if not token:
            return None
        key = _digest(token)
        login = self._logins.get(key)
        if login is None:
            return None
        now = self._clock()
        if now - login.last_seen > self._idle or now - login.started_at > self._max:
            del self._logins[key]
            login.ended = True
            return None
        if touch:
            login.last_seen = now
        return login

    def end(self, token: str | None) -> bool:
        """Log out: forget the login of ``token``; whether there was one."""
        if not token:
            return False
        login = self._logins.pop(_digest(token), None)
        if login is None:
            return False
        login.ended = True
        return True

    def _expire(self) -> None:
        now = self._clock()
        for key, login in list(self._logins.items()):
            if now - login.last_seen > self._idle or now - login.started_at > self._max:
                del self._logins[key]
                login.ended = True


def set_cookie(response: web.StreamResponse, token: str, *, secure: bool, max_age: float) -> None:
    """Send the login cookie: HttpOnly, SameSite=Strict, scoped to /admin/, expiring."""
    response.set_cookie(
        COOKIE,
        token,
        max_age=int(max_age),
        path=COOKIE_PATH,
        httponly=True,
        secure=secure,
        samesite="Strict",
    )


def clear_cookie(response: web.StreamResponse, *, secure: bool) -> None:
    """Tell the browser to drop the login cookie."""
    response.del_cookie(COOKIE, path=COOKIE_PATH, secure=secure, httponly=True, samesite="Strict")


def cookie_token(request: web.Request) -> str | None:
    """The login token the request's cookie carries, if any."""
    return request.cookies.get(COOKIE) or None
