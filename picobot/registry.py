"""A name -> factory table: how LLM providers, tools, channels and webhook platforms plug in.

Each extension point owns one :class:`Registry`; an implementation joins it with one
line (``@REGISTRY.register("name")`` or ``REGISTRY.add("name", factory)``), so adding
one touches its own module plus that line, never an if-chain. Looking up a name nobody
registered is a ConfigError that lists the names that exist.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from picobot.errors import ConfigError

F = TypeVar("F")


class Registry(Generic[F]):
    """Factories by name, in registration order (the order they are built and listed in).

    ``kind`` names what the entries are ("LLM provider"), ``key`` the config key that
    picks one (``"[llm] provider"``), both for error messages.
    """

    def __init__(self, kind: str, key: str = "") -> None:
        self.kind = kind
        self.key = key
        self._entries: dict[str, F] = {}

    def add(self, name: str, factory: F) -> F:
        """Register ``factory`` under ``name``; a name already taken is a ValueError."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._entries[name] = factory
        return factory

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator form of :meth:`add`."""
        return lambda factory: self.add(name, factory)

    @contextmanager
    def added(self, name: str, factory: F) -> Iterator[F]:
        """Register ``factory`` under ``name`` for the ``with`` block only (tests, fakes)."""
        self.add(name, factory)
        try:
            yield factory
        finally:
            del self._entries[name]

    def get(self, name: str) -> F:
        """The factory of ``name``; ConfigError listing the known names if there is none."""
        try:
            return self._entries[name]
        except KeyError:
            where = f" ({self.key})" if self.key else ""
            known = ", ".join(sorted(self._entries)) or "none"
            raise ConfigError(f"unknown {self.kind} {name!r}{where}; known: {known}") from None

    def names(self) -> list[str]:
        """Every registered name, in registration order."""
        return list(self._entries)

    def items(self) -> Iterator[tuple[str, F]]:
        """``(name, factory)`` pairs, in registration order."""
        return iter(list(self._entries.items()))

    def __contains__(self, name: object) -> bool:
        return name in self._entries
