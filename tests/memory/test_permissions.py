"""grants_for: own data automatically, Global only by exact config grant, decisions logged."""

from __future__ import annotations

import json
import logging

import pytest

from picobot.access.context import Action, Grant, Scope, ToolContext, own_data_grants
from picobot.access.permissions import CONFIG_GRANT, grants_for
from picobot.config.settings import PermissionsSettings, Settings, load_settings

ALICE = "tui:alice"
GLOBAL_READ = Grant(Action.MEMORY_READ, Scope.GLOBAL, CONFIG_GRANT)
GLOBAL_WRITE = Grant(Action.MEMORY_WRITE, Scope.GLOBAL, CONFIG_GRANT)


def test_default_is_own_data_only() -> None:
    grants = grants_for(ALICE, Settings())
    assert grants == own_data_grants()
    assert {g.source for g in grants} == {"auto"}
    assert {(g.action, g.scope) for g in grants} == {
        (action, scope)
        for action in (Action.MEMORY_READ, Action.MEMORY_WRITE)
        for scope in (Scope.SESSION, Scope.USER)
    }


def test_config_lists_add_global_grants_separately() -> None:
    # The shape a [permissions] table in config.toml parses to.
    settings = Settings.model_validate(
        {"permissions": {"global_memory_read": [ALICE, "tui:bob"], "global_memory_write": [ALICE]}}
    )
    assert grants_for(ALICE, settings) == own_data_grants() | {GLOBAL_READ, GLOBAL_WRITE}
    assert grants_for("tui:bob", settings) == own_data_grants() | {GLOBAL_READ}
    assert grants_for("tui:carol", settings) == own_data_grants()


@pytest.mark.parametrize(
    "spoofed",
    ["tui:alice ", " tui:alice", "TUI:alice", "tui:Alice", "tui:alice2", "tui:ali", "alice", ""],
)
def test_only_an_exact_user_id_matches(spoofed: str) -> None:
    settings = Settings(
        permissions=PermissionsSettings(global_memory_read=[ALICE], global_memory_write=[ALICE])
    )
    grants = grants_for(spoofed, settings)
    assert grants == own_data_grants()
    ctx = ToolContext(user_id=spoofed, grants=grants)
    assert not ctx.allows(Action.MEMORY_READ, Scope.GLOBAL)
    assert not ctx.allows(Action.MEMORY_WRITE, Scope.GLOBAL)


def test_grants_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PICOBOT_PERMISSIONS__GLOBAL_MEMORY_WRITE", json.dumps([ALICE]))
    settings = load_settings()
    assert GLOBAL_WRITE in grants_for(ALICE, settings)
    assert GLOBAL_READ not in grants_for(ALICE, settings)


def _decisions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "picobot.access.context"]


def test_decisions_are_logged_with_their_source(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="picobot.access.context")
    settings = Settings(permissions=PermissionsSettings(global_memory_write=[ALICE]))
    alice = ToolContext(user_id=ALICE, grants=grants_for(ALICE, settings))
    bob = ToolContext(user_id="tui:bob", grants=grants_for("tui:bob", settings))

    assert alice.allows(Action.MEMORY_WRITE, Scope.GLOBAL)
    assert bob.allows(Action.MEMORY_READ, Scope.USER)
    assert not bob.allows(Action.MEMORY_WRITE, Scope.GLOBAL)
    assert not alice.allows(Action.MEMORY_READ, Scope.GLOBAL)

    assert _decisions(caplog) == [
        "permission MemoryWrite{GLOBAL} for tui:alice: granted (config grant)",
        "permission MemoryRead{USER} for tui:bob: granted (auto)",
        "permission MemoryWrite{GLOBAL} for tui:bob: denied",
        "permission MemoryRead{GLOBAL} for tui:alice: denied",
    ]
    denied = [r for r in caplog.records if r.getMessage().endswith("denied")]
    assert all(r.levelno == logging.INFO for r in denied)
