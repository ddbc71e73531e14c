"""API keys: the key lists operators put in env vars, and the key a request presents.

The admin API and the WebSocket channel both read ``key,key,...`` lists (the chat ones
with an optional ``:identity`` label) and accept ``Authorization: Bearer <key>`` or
``X-API-Key: <key>``; the rules live here once, so a fix to either lands in both. A
neutral module, because nothing but the runtime and the CLI may import a channel.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from picobot.errors import ConfigError

MIN_KEY_LENGTH = 16
"""Shorter keys are refused: a logged or shown prefix must not make the rest guessable."""
KEY_PREFIX_LENGTH = 8
"""Characters of a key that may appear in an id (``api:<prefix>``, ``ws:<prefix>``)."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """One entry of a key list: ``where`` starts any error about it (never the key)."""

    where: str
    key: str
    label: str | None
    """The text after the first ``:``, when the list allows labels and the entry has one."""


def parse_key_list(raw: str, env_name: str, *, what: str, labels: bool) -> list[KeyEntry]:
    """Split a comma-separated key list; refuse short and duplicate keys.

    Blank entries are skipped and whitespace around keys and labels is dropped. With
    ``labels``, ``key:label`` entries are split at the first ``:`` (``label`` is then
    ``""`` for a trailing ``:``, for the caller to refuse). Raises ConfigError starting
    with ``"<env_name>: entry <n>"`` and naming ``what`` (e.g. ``"API keys"``); no
    message ever contains a key. Callers add their own rules on the entries.
    """
    entries: list[KeyEntry] = []
    seen: set[str] = set()
    for position, entry in enumerate(raw.split(","), start=1):
        entry = entry.strip()
        if not entry:
            continue
        key, label = entry, None
        if labels:
            key, sep, name = entry.partition(":")
            key, label = key.strip(), (name.strip() if sep else None)
        where = f"{env_name}: entry {position}"
        if len(key) < MIN_KEY_LENGTH:
            raise ConfigError(f"{where}: {what} must be at least {MIN_KEY_LENGTH} characters")
        if key in seen:
            raise ConfigError(f"{where}: duplicate key")
        seen.add(key)
        entries.append(KeyEntry(where, key, label))
    return entries


def key_prefix(key: str) -> str:
    """The part of ``key`` an id may show (see :data:`KEY_PREFIX_LENGTH`)."""
    return key[:KEY_PREFIX_LENGTH]


def presented_key(authorization: str | None, api_key: str | None) -> str | None:
    """The key from ``Authorization: Bearer <key>``, else from ``X-API-Key``, else None.

    Takes the two header values (None when absent); the scheme is case-insensitive and
    blank keys count as none.
    """
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return (api_key or "").strip() or None


def only(values: Sequence[str]) -> str | None:
    """The value of a header sent exactly once; None if absent or repeated (ambiguous)."""
    return values[0] if len(values) == 1 else None


class KeyRing(Generic[T]):
    """Keys and who each one is; :meth:`lookup` compares in constant time per key."""

    def __init__(self, keys: Iterable[tuple[str, T]]) -> None:
        self._keys = [(key.encode("utf-8"), who) for key, who in keys]

    def __len__(self) -> int:
        return len(self._keys)

    def lookup(self, presented: str | None) -> T | None:
        """Who ``presented`` belongs to, or None (also for None)."""
        if presented is None:
            return None
        candidate = presented.encode("utf-8", "surrogateescape")
        found: T | None = None
        for key, who in self._keys:
            # Every key is compared, without an early exit, so timing reveals nothing.
            if hmac.compare_digest(candidate, key):
                found = who
        return found
