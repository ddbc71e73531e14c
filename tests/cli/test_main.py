"""The command line, run in-process through main(), plus one real `python -m picobot`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest

import picobot
from picobot.cli.main import main
from picobot.config.reference import render_config
from picobot.config.settings import Settings
from picobot.errors import LLMError, StoreUnavailable

WriteConfig = Callable[..., Path]
REPO = Path(__file__).resolve().parents[2]
BAD_CONFIG = (
    "[llm]\ntemprature = 0.5\ntemperature = 9\n"
    '[session.memory]\ncontext_budget_tokens = "lots"\n'
    "[bogus]\nx = 1\n"
)


# --- init ---------------------------------------------------------------------------------


def test_init_writes_the_commented_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init"]) == 0
    assert (tmp_path / "config.toml").read_text(encoding="utf-8") == render_config()
    assert "wrote config.toml" in capsys.readouterr().out


def test_init_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "config.toml"
    target.write_text("# mine\n", encoding="utf-8")
    assert main(["init"]) == 1
    err = capsys.readouterr().err
    assert err == "picobot: error: config.toml already exists; use --force to overwrite it\n"
    assert target.read_text(encoding="utf-8") == "# mine\n"


def test_init_force_overwrites(tmp_path: Path) -> None:
    target = tmp_path / "config.toml"
    target.write_text("# mine\n", encoding="utf-8")
    assert main(["init", "--force"]) == 0
    assert target.read_text(encoding="utf-8") == render_config()


def test_init_output_path(tmp_path: Path) -> None:
    assert main(["init", "-o", "etc/picobot/config.toml"]) == 0
    assert (tmp_path / "etc/picobot/config.toml").read_text(encoding="utf-8") == render_config()
    assert not (tmp_path / "config.toml").exists()


# --- check-config -------------------------------------------------------------------------


def test_check_config_ok(write_config: WriteConfig, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config('[llm]\nprovider = "scripted"\n', name="mine.toml")
    assert main(["check-config", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: ok\n"


def test_check_config_defaults_to_the_resolved_file(
    write_config: WriteConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-config"]) == 0
    assert capsys.readouterr().out == "no config file; defaults apply: ok\n"
    write_config("[llm]\ntemprature = 1\n")
    assert main(["check-config"]) == 3
    # Problems go to stderr, nothing to stdout.
    assert capsys.readouterr() == ("", "config.toml: llm.temprature: unknown key\n")
    other = write_config("[agent]\nname = 3\n", name="other.toml")
    assert main(["--config", str(other), "check-config"]) == 3
    assert capsys.readouterr().err.startswith(f"{other}: agent.name: ")
    # --config works after the subcommand too.
    assert main(["check-config", "--config", str(other)]) == 3
    assert capsys.readouterr().err.startswith(f"{other}: agent.name: ")


def test_check_config_names_every_bad_key(
    write_config: WriteConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(BAD_CONFIG)
    assert main(["check-config", str(path)]) == 3
    lines = capsys.readouterr().err.splitlines()
    assert f"{path}: llm.temprature: unknown key" in lines
    assert f"{path}: bogus: unknown key" in lines
    named = {line.removeprefix(f"{path}: ").split(":")[0] for line in lines}
    assert named == {
        "llm.temprature",
        "llm.temperature",
        "session.memory.context_budget_tokens",
        "bogus",
    }


def test_check_config_bad_syntax(
    write_config: WriteConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config('[agent]\nname = "PicoBot"\nname = = 1\n')
    assert main(["check-config", str(path)]) == 3
    captured = capsys.readouterr()
    assert captured.err.startswith(f"picobot: error: {path}: invalid TOML: ")
    assert "line 3" in captured.err
    assert "Traceback" not in captured.err


def test_check_config_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "nope.toml"]) == 3
    assert capsys.readouterr().err == "picobot: error: config file nope.toml does not exist\n"


def test_check_config_reports_bad_environment(
    write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config("[llm]\ntemperature = 1.0\n")
    monkeypatch.setenv("PICOBOT_LLM__TEMPERATURE", "9")
    assert main(["check-config", str(path)]) == 3
    out, err = capsys.readouterr()
    # A failing source means no "ok" anywhere: the file alone passing is not the verdict.
    assert out == ""
    assert err.startswith("environment: PICOBOT_LLM__TEMPERATURE (llm.temperature): ")


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("PICOBOT_LLM__TEMPERATURE", "9", "PICOBOT_LLM__TEMPERATURE (llm.temperature): "),
        ("picobot_agent__nmae", "x", "picobot_agent__nmae: no such setting"),
        (
            "PICOBOT_PERMISSIONS__GLOBAL_MEMORY_READ",
            "tui:a",
            "PICOBOT_PERMISSIONS__GLOBAL_MEMORY_READ: cannot parse the value",
        ),
    ],
)
def test_check_config_blames_the_environment_not_the_file(
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    value: str,
    problem: str,
) -> None:
    # The file does not mention the key the variable sets: its pass must not see it.
    path = write_config("[session.retention]\nmax_age_days = 30\n")
    monkeypatch.setenv(name, value)
    assert main(["check-config", str(path)]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith(f"environment: {problem}"), err


TELEGRAM = '[llm]\nprovider = "scripted"\n[channels.webhook.telegram]\nenabled = true\n'


def test_check_config_fails_an_enabled_channel_without_its_secret(
    write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before, this passed with "ok" and `serve` then exited 3 on the missing token.
    path = write_config(TELEGRAM)
    monkeypatch.delenv("PICOBOT_TELEGRAM_BOT_TOKEN", raising=False)
    monkeypatch.setenv("PICOBOT_TELEGRAM_SECRET_TOKEN", "s3cret-token")
    assert main(["check-config", str(path)]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("channels.webhook.telegram: ")
    assert "PICOBOT_TELEGRAM_BOT_TOKEN" in err and "s3cret-token" not in err
    # With the token set, the same file passes.
    monkeypatch.setenv("PICOBOT_TELEGRAM_BOT_TOKEN", "123:abc")
    assert main(["check-config", str(path)]) == 0
    assert capsys.readouterr() == (f"{path}: ok\n", "")


def test_check_config_fails_websocket_without_keys_and_a_model_without_its_key(
    write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(
        '[llm]\nprovider = "anthropic"\napi_key_env = "MY_ANTHROPIC_KEY"\n'
        "[channels.websocket]\nenabled = true\n"
    )
    monkeypatch.delenv("MY_ANTHROPIC_KEY", raising=False)
    monkeypatch.delenv("PICOBOT_WS_API_KEYS", raising=False)
    assert main(["check-config", str(path)]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert [line.split(":")[0] for line in lines] == ["llm", "channels.websocket"], err
    assert "MY_ANTHROPIC_KEY" in lines[0] and "PICOBOT_WS_API_KEYS" in lines[1]


def test_check_config_a_file_that_is_not_utf8(
    write_config: WriteConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config("")
    path.write_bytes(b'[agent]\nname = "caf\xe9"\n')  # Latin-1, as an old editor saves
    assert main(["check-config", str(path)]) == 3
    assert capsys.readouterr().err == f"picobot: error: {path}: not UTF-8 (byte 20)\n"


def test_check_config_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "etc").mkdir()
    assert main(["check-config", "etc"]) == 3
    assert capsys.readouterr().err == "picobot: error: config file etc is a directory\n"
    # ./config.toml, optional as it is, is not skipped silently when it is a directory.
    (tmp_path / "config.toml").mkdir()
    assert main(["check-config"]) == 3
    assert capsys.readouterr().err == "picobot: error: config file config.toml is a directory\n"


# --- global options -----------------------------------------------------------------------


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("init", "check-config", "tui", "sessions", "migrate"):
        # Name and its one-line help on the same line.
        assert re.search(rf"^ +{name} +\w", out, re.M), f"{name} missing from --help"
    assert "--config FILE" in out
    assert out.startswith("usage: picobot [-h] [--version] [--config FILE] COMMAND ...\n")
    # A subcommand's usage names it right after the program.
    assert main(["retention", "run", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: picobot retention run [-h]")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"picobot {picobot.__version__}\n"


def test_no_subcommand_or_unknown_one_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([]) == 2
    assert "usage: picobot" in capsys.readouterr().err
    assert main(["frobnicate"]) == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


# --- tui and error mapping ----------------------------------------------------------------


@pytest.fixture
def fake_tui(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[Settings], object]], None]:
    """Replace picobot.channels.tui with a module whose run_tui is the given function."""
    import picobot.channels

    def install(run_tui: Callable[[Settings], object]) -> None:
        module = types.ModuleType("picobot.channels.tui")
        module.run_tui = run_tui  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "picobot.channels.tui", module)
        monkeypatch.setattr(picobot.channels, "tui", module, raising=False)

    return install


def test_tui_gets_the_loaded_settings(
    fake_tui: Callable[[Callable[[Settings], object]], None],
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[Settings] = []

    def run_tui(settings: Settings) -> int:
        seen.append(settings)
        return 0

    fake_tui(run_tui)
    path = write_config('[channels.tui]\nuser_name = "alice"\n', name="tui.toml")
    monkeypatch.setenv("PICOBOT_AGENT__NAME", "Envy")
    assert main(["--config", str(path), "tui"]) == 0
    (settings,) = seen
    assert settings.channels.tui.user_name == "alice"
    assert settings.agent.name == "Envy"


@pytest.mark.parametrize(
    ("error", "code"),
    [(StoreUnavailable("database is locked"), 1), (LLMError("model server unreachable"), 1)],
)
def test_picobot_errors_are_one_line_messages(
    fake_tui: Callable[[Callable[[Settings], object]], None],
    capsys: pytest.CaptureFixture[str],
    error: Exception,
    code: int,
) -> None:
    def run_tui(settings: Settings) -> None:
        raise error

    fake_tui(run_tui)
    assert main(["tui"]) == code
    assert capsys.readouterr().err == f"picobot: error: {error}\n"


def test_config_error_exits_3_without_traceback(
    write_config: WriteConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config("[llm]\ntemprature = 0.5\n")
    assert main(["tui"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("picobot: error: invalid configuration (config.toml")
    assert "llm.temprature: unknown key" in err
    assert "Traceback" not in err


# --- the real entry point -----------------------------------------------------------------


def run_picobot(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m picobot ARGS`` of this checkout, without the caller's PICOBOT_* vars."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run(  # noqa: S603 - fixed argv, our own interpreter
        [sys.executable, "-m", "picobot", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_python_dash_m_picobot_check_config(write_config: WriteConfig, tmp_path: Path) -> None:
    path = write_config(BAD_CONFIG)
    proc = run_picobot("check-config", str(path), cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert f"{path}: llm.temprature: unknown key" in proc.stderr.splitlines()
    assert proc.stdout == "" and "Traceback" not in proc.stderr


def test_python_dash_m_picobot_with_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    # Every command loads the config first; none may end in a traceback.
    (tmp_path / "config.toml").write_bytes(b"\xff\xfe[agent]\n")
    proc = run_picobot("status", cwd=tmp_path)
    assert proc.returncode == 3
    assert proc.stderr == "picobot: error: config.toml: not UTF-8 (byte 1)\n"
