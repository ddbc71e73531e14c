"""PICOBOT_* variables: each one is a setting, a secret PicoBot reads on purpose, or an error."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from picobot.cli.common import EXIT_CONFIG
from picobot.cli.main import main
from picobot.config.settings import Settings, load_settings
from picobot.errors import ConfigError

WriteConfig = Callable[..., Path]


def problems_of(monkeypatch: pytest.MonkeyPatch, **variables: str) -> list[str]:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    return info.value.problems


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("PICOBOT_SESSIONS__RETENTION__MAX_AGE_DAYS", "PICOBOT_SESSION__RETENTION__MAX_AGE_DAYS"),
        ("PICOBOT_PRIVACYY__REDACT_SECRETS", "PICOBOT_PRIVACY__REDACT_SECRETS"),
        ("PICOBOT_LLM_MODEL", "PICOBOT_LLM__MODEL"),
        ("PICOBOT_LLM__MODEL__NAME", "PICOBOT_LLM__MODEL"),
        ("PICOBOT_WS_API_KEY", "PICOBOT_WS_API_KEYS"),
    ],
)
def test_a_variable_that_is_no_setting_is_named_with_the_closest_name(
    monkeypatch: pytest.MonkeyPatch, typo: str, meant: str
) -> None:
    # These were silently ignored: the override the operator meant never applied.
    (problem,) = problems_of(monkeypatch, **{typo: "7"})
    assert problem.startswith(f"{typo}: no such setting")
    assert problem.endswith(f"did you mean {meant}?")


def test_a_name_like_no_setting_gets_no_suggestion(monkeypatch: pytest.MonkeyPatch) -> None:
    (problem,) = problems_of(monkeypatch, PICOBOT_ZZZ="1")
    assert problem.startswith("PICOBOT_ZZZ: no such setting") and "did you mean" not in problem


def test_every_unknown_variable_is_reported_with_the_bad_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problems = problems_of(
        monkeypatch,
        PICOBOT_LLM__TEMPERATURE="9",
        PICOBOT_LOGING__LEVEL="DEBUG",
        PICOBOT_AGENT__NAM="x",
    )
    assert sorted(p.split(":")[0] for p in problems) == [
        "PICOBOT_AGENT__NAM",
        "PICOBOT_LLM__TEMPERATURE (llm.temperature)",
        "PICOBOT_LOGING__LEVEL",
    ]


@pytest.mark.parametrize(
    "name",
    [
        "PICOBOT_CONFIG",
        "PICOBOT_ENV_FILE",
        "PICOBOT_WS_KEY",
        "PICOBOT_WS_API_KEYS",
        "PICOBOT_ADMIN_API_KEYS",
        "PICOBOT_GENERIC_WEBHOOK_SECRET",
        "PICOBOT_TELEGRAM_BOT_TOKEN",
    ],
)
def test_variables_read_on_purpose_are_no_error(
    monkeypatch: pytest.MonkeyPatch, write_config: WriteConfig, name: str
) -> None:
    path = write_config("")
    monkeypatch.setenv(name, str(path) if name == "PICOBOT_CONFIG" else ".env")
    if name == "PICOBOT_ENV_FILE":
        write_config("", name=".env")
    assert load_settings().llm.provider == "local"


def test_a_secret_variable_named_in_the_file_or_environment_is_no_error(
    monkeypatch: pytest.MonkeyPatch, write_config: WriteConfig
) -> None:
    write_config('[llm]\napi_key_env = "PICOBOT_MY_OPENAI_KEY"\n')
    monkeypatch.setenv("PICOBOT_MY_OPENAI_KEY", "sk-test")
    monkeypatch.setenv("PICOBOT_CHANNELS__WEBSOCKET__API_KEYS_ENV", "PICOBOT_CLIENT_KEYS")
    monkeypatch.setenv("PICOBOT_CLIENT_KEYS", "k" * 20)
    settings = load_settings()
    assert settings.llm.api_key_env == "PICOBOT_MY_OPENAI_KEY"
    assert settings.channels.websocket.api_keys_env == "PICOBOT_CLIENT_KEYS"
    # Without the file naming it, the same variable is a stray.
    Path("config.toml").unlink()
    with pytest.raises(ConfigError) as info:
        load_settings()
    (problem,) = info.value.problems
    assert problem.startswith("PICOBOT_MY_OPENAI_KEY: no such setting")


def test_a_secret_in_a_typoed_name_is_never_suggested(monkeypatch: pytest.MonkeyPatch) -> None:
    # A configured *_env value may be a pasted secret that looks like a name: the
    # suggestion only offers names PicoBot defines.
    monkeypatch.setenv("PICOBOT_LLM__API_KEY_ENV", "PICOBOT_SK_LIVE_4F9A2C")
    (problem,) = problems_of(monkeypatch, PICOBOT_SK_LIVE_4F9A2D="x")
    assert "SK_LIVE_4F9A2C" not in problem


def test_tui_key_env_is_a_secret_not_a_typo(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PICOBOT_REMOTE_KEY", "k" * 20)
    # The remote server is unreachable (port 1): the command gets past loading settings.
    status = main(["tui", "--connect", "ws://127.0.0.1:1/ws", "--key-env", "PICOBOT_REMOTE_KEY"])
    assert status == 1
    assert "no such setting" not in capsys.readouterr().err
    assert main(["check-config"]) == EXIT_CONFIG
    assert "PICOBOT_REMOTE_KEY: no such setting" in capsys.readouterr().err


def test_variable_names_are_not_case_sensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("picobot_llm__Model", "m1")
    assert load_settings().llm.model == "m1"


def test_a_section_variable_takes_json_and_its_keys_refine_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PICOBOT_LLM", '{"model": "from-section", "max_tokens": 100}')
    monkeypatch.setenv("PICOBOT_LLM__MODEL", "from-key")
    settings = load_settings()
    assert (settings.llm.model, settings.llm.max_tokens) == ("from-key", 100)


def test_a_bad_key_inside_a_section_variable_names_that_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (problem,) = problems_of(monkeypatch, PICOBOT_LLM='{"temperature": 9}')
    assert problem.startswith("PICOBOT_LLM (llm.temperature): ")
    (problem,) = problems_of(monkeypatch, PICOBOT_LLM="not json")
    assert problem.startswith("PICOBOT_LLM: cannot parse the value: it must be JSON, an object")


def test_a_list_that_is_not_json_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    (problem,) = problems_of(monkeypatch, PICOBOT_PERMISSIONS__GLOBAL_MEMORY_WRITE="tui:a")
    assert problem.startswith("PICOBOT_PERMISSIONS__GLOBAL_MEMORY_WRITE: cannot parse the value")
    assert '["a", "b"]' in problem


def test_a_file_key_is_not_blamed_on_a_section_variable(
    monkeypatch: pytest.MonkeyPatch, write_config: WriteConfig
) -> None:
    write_config("[llm]\ntemperature = 9\n")
    (problem,) = problems_of(monkeypatch, PICOBOT_LLM='{"model": "m"}')
    assert problem.startswith("llm.temperature: ")


def test_settings_built_in_code_refuse_a_stray_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PICOBOT_LLM__MODEL", "m")
    assert Settings().llm.model == "m"
    monkeypatch.setenv("PICOBOT_LLM__MODLE", "m")
    with pytest.raises(ConfigError, match="PICOBOT_LLM__MODLE: no such setting"):
        Settings()
