"""Bounds that keep PicoBot working, checked at load; check-config runs the very same checks."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from picobot.cli.common import EXIT_CONFIG
from picobot.cli.main import main
from picobot.config.settings import load_settings
from picobot.errors import ConfigError

WriteConfig = Callable[..., Path]


def refused(write_config: WriteConfig, toml: str) -> list[str]:
    """The problems of loading ``toml`` as ./config.toml (which must fail)."""
    write_config(toml)
    with pytest.raises(ConfigError) as info:
        load_settings()
    return info.value.problems


# (table, key, largest value allowed): each was unbounded and broke PicoBot above it.
BOUNDS = [
    # The retention cutoff fell before year 1: `retention run` and /api/v1/retention crashed.
    ("session.retention", "max_age_days", 36_500),
    # The next erasure's date passed year 9999: `picobot status` crashed formatting it.
    ("session.retention", "erase_interval_secs", 365 * 86_400),
    ("session.retention", "cleanup_interval_secs", 365 * 86_400),
    # The storage caps become SQL LIMITs and counts.
    ("session.retention", "max_sessions_per_user", 1_000_000),
    ("session.retention", "max_messages_per_session", 1_000_000),
    # SQL LIMITs: SQLite refuses integers past 2**63 ("Python int too large").
    ("session.memory", "max_session_messages", 10_000),
    ("session.memory", "max_user_memories", 10_000),
    ("session.memory", "summarization_keep_recent", 10_000),
    ("privacy", "retention_batch_size", 100_000),
    # Token counts beyond any model's window (llama.cpp's n_ctx is a C uint32).
    ("llm", "context_tokens", 1_048_576),
    ("session.memory", "summarization_trigger_tokens", 1_048_576),
    ("session.memory", "recall_budget_tokens", 1_048_576),
    # Timeouts and intervals that are never reached in practice, only overflow.
    ("data", "busy_timeout_ms", 3_600_000),
    ("privacy", "confirmation_timeout_secs", 86_400),
    ("session.memory", "summarization_check_interval_secs", 86_400),
    ("session.memory", "max_memory_chars", 1_000_000),
]


@pytest.mark.parametrize(("table", "key", "top"), BOUNDS)
def test_a_bounded_key_loads_at_its_bound_and_is_refused_past_it(
    write_config: WriteConfig, table: str, key: str, top: int
) -> None:
    def config(value: int) -> str:
        # The remote provider: the local model's window check would mask the bounds.
        head = '[llm]\nprovider = "openai"\n' + ("" if table == "llm" else f"[{table}]\n")
        return head + f"{key} = {value}\n"

    write_config(config(top))
    load_settings()
    for bad in (top + 1, 2**63):
        (problem,) = refused(write_config, config(bad))
        assert problem.startswith(f"{table}.{key}: Input should be less than or equal to {top}")


def test_the_context_budget_bound(write_config: WriteConfig) -> None:
    toml = '[llm]\nprovider = "openai"\n[session.memory]\ncontext_budget_tokens = 1048577\n'
    (problem,) = refused(write_config, toml)
    assert problem.startswith("session.memory.context_budget_tokens: ") and "1048576" in problem


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
@pytest.mark.parametrize(
    ("table", "key"),
    [("llm", "timeout_secs"), ("llm", "temperature"), ("channels.websocket", "ping_interval_secs")],
)
def test_infinite_or_nan_floats_are_refused(
    write_config: WriteConfig, table: str, key: str, value: str
) -> None:
    # Valid TOML, but no timeout or interval works with them.
    problems = refused(write_config, f"[{table}]\n{key} = {value}\n")
    assert any(p.startswith(f"{table}.{key}: ") for p in problems)


def test_retention_runs_at_the_largest_age_and_refuses_a_larger_one(
    write_config: WriteConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config("[session.retention]\nmax_age_days = 36500\n")
    assert main(["migrate"]) == 0
    assert main(["retention", "run", "--dry-run"]) == 0
    assert "(36500 days ago)" in capsys.readouterr().out
    # Was a traceback: "year -712 is out of range".
    write_config("[session.retention]\nmax_age_days = 1000000\n")
    assert main(["retention", "run", "--dry-run"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "session.retention.max_age_days: Input should be less than or equal to 36500" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [("(unclosed", "invalid regular expression"), ("x*", "pattern 'x*' matches empty text")],
)
def test_check_config_refuses_the_redaction_pattern_serve_would_refuse(
    write_config: WriteConfig, capsys: pytest.CaptureFixture[str], pattern: str, reason: str
) -> None:
    # check-config used to pass it; serve then failed building the redactor.
    write_config(f"[privacy]\nextra_redaction_patterns = ['EMP-\\d+', '{pattern}']\n")
    assert main(["check-config"]) == EXIT_CONFIG
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"config.toml: privacy.extra_redaction_patterns.1: Value error, {reason}"
    )
    with pytest.raises(ConfigError, match=re.escape(reason)):
        load_settings()


@pytest.mark.parametrize(
    ("toml", "env"),
    [
        ("", {}),
        ("[session.retention]\nmax_age_days = 1000000\n", {}),
        ("[privacy]\nextra_redaction_patterns = ['(']\n", {}),
        ("", {"PICOBOT_SESSIONS__RETENTION__MAX_AGE_DAYS": "7"}),
        ("", {"PICOBOT_LLM__TIMEOUT_SECS": "inf"}),
        ('[llm]\nmodel_path = "own.gguf"\ncontext_tokens = 4096\n', {}),
    ],
)
def test_check_config_fails_exactly_when_loading_fails(
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    toml: str,
    env: dict[str, str],
) -> None:
    write_config(toml)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        load_settings()
        loads = True
    except ConfigError:
        loads = False
    assert (main(["check-config"]) == 0) is loads
    assert loads is (not toml and not env)
