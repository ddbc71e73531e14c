"""The .env file and the secrets directory: as settings sources and as homes of secrets."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from picobot.cli.common import EXIT_CONFIG
from picobot.cli.main import main
from picobot.config.settings import load_settings
from picobot.config.sources import parse_env_file, read_secret
from picobot.errors import ConfigError

WriteConfig = Callable[..., Path]
SECRET = "sk-proj-9f2c1a7e4b3d5e6f"


@pytest.fixture
def secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty secrets directory, in use."""
    folder = tmp_path / "secrets"
    folder.mkdir()
    monkeypatch.setenv("PICOBOT_SECRETS_DIR", str(folder))
    return folder


def test_env_file_lines(write_config: WriteConfig) -> None:
    path = write_config(
        "# a comment\n"
        "\n"
        "PLAIN=value with spaces  # trailing comment\n"
        "export EXPORTED=yes\n"
        "SINGLE='it''s # not a comment'\n".replace("''", "")
        + 'DOUBLE="a\\"b\\\\c\\nd"\n'
        "EMPTY=\n"
        "HASH=a#b\n",
        name=".env",
    )
    assert {v.name: v.value for v in parse_env_file(path)} == {
        "PLAIN": "value with spaces",
        "EXPORTED": "yes",
        "SINGLE": "its # not a comment",
        "DOUBLE": 'a"b\\c\nd',
        "EMPTY": "",
        "HASH": "a#b",
    }


@pytest.mark.parametrize(
    "line", ["no equals sign", "1BAD=x", f'KEY="{SECRET}', f"KEY='{SECRET}' junk"]
)
def test_a_bad_env_file_line_is_named_but_never_shown(write_config: WriteConfig, line: str) -> None:
    write_config(f"OK=1\n{line}\n", name=".env")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert ".env line 2: not NAME=value" in str(info.value)
    assert SECRET not in str(info.value) and "equals" not in str(info.value)


def test_env_file_settings_sit_between_the_environment_and_the_file(
    write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch, secrets: Path
) -> None:
    write_config('[agent]\nname = "file"\n[llm]\nmodel = "file"\nmax_tokens = 100\n')
    (secrets / "PICOBOT_AGENT__NAME").write_text("secrets\n")
    (secrets / "PICOBOT_LLM__MODEL").write_text("secrets\n")
    (secrets / "PICOBOT_LLM__MAX_TOKENS").write_text("200\n")
    write_config("PICOBOT_AGENT__NAME=dotenv\nPICOBOT_LLM__MODEL=dotenv\n", name=".env")
    monkeypatch.setenv("PICOBOT_AGENT__NAME", "environment")
    settings = load_settings()
    assert settings.agent.name == "environment"
    assert settings.llm.model == "dotenv"
    assert settings.llm.max_tokens == 200


def test_a_bad_value_names_its_env_file_line(write_config: WriteConfig) -> None:
    write_config("PICOBOT_LLM__TEMPERATURE=0.5\nPICOBOT_LLM__TEMPERATURE=9\n", name=".env")
    with pytest.raises(ConfigError) as info:
        load_settings()
    (problem,) = info.value.problems
    assert problem.startswith("PICOBOT_LLM__TEMPERATURE in .env line 2 (llm.temperature): ")


def test_a_stray_variable_in_the_env_file_or_secrets_dir_is_an_error(
    write_config: WriteConfig, secrets: Path
) -> None:
    write_config("PICOBOT_LLM__MODLE=x\nOPENAI_API_KEY=not-a-setting\n", name=".env")
    (secrets / "PICOBOT_SESION__MEMORY__MAX_USER_MEMORIES").write_text("3")
    (secrets / "UNRELATED_SECRET").write_text("ignored as a setting")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert sorted(p.split(";")[0] for p in info.value.problems) == [
        "PICOBOT_LLM__MODLE in .env line 1: no such setting (settings are"
        " PICOBOT_<SECTION>__<KEY>, see docs/configuration.md)",
        f"PICOBOT_SESION__MEMORY__MAX_USER_MEMORIES in {secrets}/PICOBOT_SESION__MEMORY__"
        "MAX_USER_MEMORIES: no such setting (settings are PICOBOT_<SECTION>__<KEY>, see"
        " docs/configuration.md)",
    ]


def test_bootstrap_variables_only_come_from_the_environment(write_config: WriteConfig) -> None:
    write_config("PICOBOT_CONFIG=other.toml\n", name=".env")
    with pytest.raises(ConfigError, match="PICOBOT_CONFIG is read from the process environment"):
        load_settings()


def test_read_secret_looks_in_the_environment_then_env_file_then_secrets_dir(
    write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch, secrets: Path
) -> None:
    (secrets / "MY_KEY").write_text("from-secrets\n")
    assert read_secret("MY_KEY") == "from-secrets"
    write_config("MY_KEY='from-dotenv'\n", name=".env")
    assert read_secret("MY_KEY") == "from-dotenv"
    monkeypatch.setenv("MY_KEY", "from-environment")
    assert read_secret("MY_KEY") == "from-environment"
    assert read_secret("NOBODY_HAS_THIS") == ""


def test_missing_default_sources_are_fine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PICOBOT_SECRETS_DIR")
    monkeypatch.setattr("picobot.config.sources.DEFAULT_SECRETS_DIR", str(tmp_path / "none"))
    assert load_settings().llm.provider == "local"


@pytest.mark.parametrize("variable", ["PICOBOT_ENV_FILE", "PICOBOT_SECRETS_DIR"])
def test_a_named_source_must_exist(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, "nowhere")
    with pytest.raises(ConfigError, match=f"{variable} names nowhere, which does not exist"):
        load_settings()


def test_an_unreadable_env_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / ".env").mkdir()
    with pytest.raises(ConfigError, match=r"\.env: cannot read"):
        load_settings()


def test_an_unreadable_secrets_dir_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "secrets").write_text("a file, not a directory")
    monkeypatch.setenv("PICOBOT_SECRETS_DIR", str(tmp_path / "secrets"))
    with pytest.raises(ConfigError, match=r"secrets directory .* cannot be read"):
        load_settings()
    with pytest.raises(ConfigError, match="cannot be read"):
        read_secret("ANY_KEY")


def test_an_empty_variable_switches_the_env_file_off(
    write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config("PICOBOT_AGENT__NAME=dotenv\n", name=".env")
    assert load_settings().agent.name == "dotenv"
    monkeypatch.setenv("PICOBOT_ENV_FILE", "")
    assert load_settings().agent.name == "PicoBot"


def test_check_config_reports_env_file_problems_by_line(
    write_config: WriteConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config("[llm]\nmax_tokens = 100\n")
    write_config("PICOBOT_PRIVACYY__REDACT_SECRETS=false\n", name=".env")
    assert main(["check-config"]) == EXIT_CONFIG
    out, err = capsys.readouterr()
    assert out == ""  # no "ok" while a source fails
    (line,) = err.splitlines()
    assert line.startswith("environment: PICOBOT_PRIVACYY__REDACT_SECRETS in .env line 1:")
    assert line.endswith("did you mean PICOBOT_PRIVACY__REDACT_SECRETS?")
