"""Small shared pieces of webhook authentication: HMAC, comparison, secrets from env.

Every platform proves a request the same few ways (an HMAC-SHA256 over the raw body,
or a shared token in a header), and every secret comes from an environment variable
named in the config; these helpers keep the details in one place.
"""

from __future__ import annotations

import hashlib
import hmac

from picobot.channels.webhook.base import WebhookError
from picobot.config.sources import read_secret
from picobot.errors import ConfigError

__all__ = [
    "check_timestamp",
    "hmac_sha256_hex",
    "require_secret",
    "same",
    "secret_from_env",
    "seen_key",
]

MAX_TIMESTAMP_DIGITS = 12

_SEEN_LABEL = b"picobot webhook seen\x00"
"""Sets the replay-guard keys apart from every signature made with the same secret."""


def hmac_sha256_hex(secret: str | bytes, message: bytes) -> str:
    """The lowercase hex HMAC-SHA256 of ``message`` under ``secret`` (UTF-8 if str)."""
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def seen_key(secret: str | bytes, platform: str, message_id: str) -> bytes:
    """The replay-guard key of a message: HMAC-SHA256 of ``<platform>:<message id>``.

    Keyed with the platform's verification secret, which stays in the environment: the
    stored key tells nothing about the id to whoever has only the database (a message
    id may spell a phone number). Rotating the secret forgets the keys, which is safe:
    a request captured before the rotation no longer passes the signature check.
    """
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, _SEEN_LABEL + f"{platform}:{message_id}".encode(), hashlib.sha256).digest()


def check_timestamp(stamp: str, now: float, tolerance_secs: float) -> None:
    """Raise :class:`WebhookError` (401) unless ``stamp`` is Unix seconds within
    ``tolerance_secs`` of ``now``, either way: a signed request is fresh only that long,
    so a captured one cannot be replayed later."""
    if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= MAX_TIMESTAMP_DIGITS):
        raise WebhookError(401, "invalid timestamp")
    if abs(now - int(stamp)) > tolerance_secs:
        raise WebhookError(401, "stale timestamp")


def same(given: str | None, expected: str) -> bool:
    """Whether ``given`` equals ``expected``, in constant time; None never matches.

    Compared as UTF-8 bytes: :func:`hmac.compare_digest` refuses non-ASCII ``str``,
    and a header is whatever the sender chose to put there.
    """
    if given is None:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())


def secret_from_env(env_var: str, config_key: str) -> str:
    """The secret held by variable ``env_var`` (see :func:`read_secret`), stripped.

    Raises :class:`ConfigError` naming the variable and the config key that names it
    (never a value) when the variable is unset or blank.
    """
    value = read_secret(env_var)
    if not value:
        raise ConfigError(
            f"the environment variable {env_var} (named by {config_key}) is not set or empty"
        )
    return value


def require_secret(value: str, env_var: str, what: str) -> str:
    """``value`` stripped, or a :class:`ConfigError` naming ``env_var`` when it is blank.

    For constructors that take secrets directly (tests, embedding): a blank secret
    would make every signature check trivially weaker, so it is refused up front.
    """
    value = value.strip()
    if not value:
        raise ConfigError(f"the {what} ({env_var}) is empty")
    return value
