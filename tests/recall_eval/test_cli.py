"""The command line: its checks, its settings, and a replay that fails saying where."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.recall import synthetic
from bench.recall.child import setting_env
from bench.recall.cli import DEFAULTS, main, memory_settings, parse_args


def test_settings_become_picobot_env_vars_and_reach_the_baselines() -> None:
    assert setting_env("session.memory.recall_budget_tokens=1600") == (
        "PICOBOT_SESSION__MEMORY__RECALL_BUDGET_TOKENS",
        "1600",
    )
    sizes = memory_settings(dict([setting_env("session.memory.max_session_messages=8")]))
    assert sizes == {**DEFAULTS, "max_session_messages": 8}
    with pytest.raises(ValueError, match=r"section\.key=value"):
        setting_env("recall_budget_tokens=5")


@pytest.mark.parametrize(
    "argv",
    [
        ["--modes", "fresh,later"],
        ["--questions", "0"],
        ["--setting", "nokey"],
        ["--learn", "--learn-local", "--modes", "fresh,session"],
    ],
)
def test_bad_arguments_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2


def test_defaults_and_a_positional_file() -> None:
    cfg = parse_args(["some.json", "--modes", "continue", "--no-purge"])
    assert cfg.file == Path("some.json")
    assert cfg.modes == ("continue",) and not cfg.purge
    assert parse_args([]).file.name == "locomo-dev.json"
    assert parse_args([]).modes == ("fresh", "continue", "kept", "session")


def test_a_turn_picobot_refuses_fails_the_run_naming_the_turn_and_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = synthetic.generate(1)
    data[0]["conversation"]["session_2"][1]["text"] = "long " * 60  # over 256 bytes
    path = tmp_path / "one.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    argv = ["--file", str(path), "--out", str(tmp_path / "out")]
    assert main([*argv, "--setting", "channels.websocket.max_message_bytes=256"]) == 1
    err = capsys.readouterr().err
    assert "syn-1 D2:2: PicoBot error too_large" in err
    log = Path(err.split("(server log: ")[1].split(")")[0])
    assert log.name == "picobot.log" and log.is_file()  # kept for debugging
    assert not (tmp_path / "out").exists()
    shutil.rmtree(log.parent.parent)
