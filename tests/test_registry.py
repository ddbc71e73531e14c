"""The name -> factory table behind every extension point."""

from __future__ import annotations

import pytest

from picobot.errors import ConfigError
from picobot.registry import Registry


def test_entries_keep_registration_order_and_names_are_unique() -> None:
    registry: Registry[int] = Registry("widget")
    registry.add("b", 2)

    @registry.register("a")
    def _a() -> None: ...

    registry.add("c", 3)
    assert registry.names() == ["b", "a", "c"]
    assert registry.get("c") == 3 and "a" in registry and "z" not in registry
    with pytest.raises(ValueError, match="widget 'b' registered twice"):
        registry.add("b", 4)
    with registry.added("d", 4):
        assert registry.names() == ["b", "a", "c", "d"]
    assert [name for name, _ in registry.items()] == ["b", "a", "c"]


def test_an_unknown_name_lists_the_known_ones() -> None:
    registry: Registry[int] = Registry("widget", "[shop] widget")
    registry.add("spoon", 1)
    registry.add("fork", 2)
    with pytest.raises(ConfigError) as caught:
        registry.get("knife")
    assert str(caught.value) == "unknown widget 'knife' ([shop] widget); known: fork, spoon"
    with pytest.raises(ConfigError, match="known: none"):
        Registry[int]("gadget").get("x")
