"""An empty ``host`` listened on every interface (0.0.0.0 and [::]) while check-config
said ok; it must be refused, naming the key, from the file and from the environment."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from picobot.cli.common import EXIT_CONFIG, EXIT_OK
from picobot.cli.main import main

WriteConfig = Callable[..., Path]


@pytest.mark.parametrize("section", ["server", "channels.websocket"])
@pytest.mark.parametrize("host", ["", "   "])
def test_check_config_refuses_an_empty_host_in_the_file(
    write_config: WriteConfig, capsys: pytest.CaptureFixture[str], section: str, host: str
) -> None:
    path = write_config(f'[{section}]\nhost = "{host}"\n')
    assert main(["check-config", str(path)]) == EXIT_CONFIG
    out = capsys.readouterr().err
    assert out.startswith(f"{path}: {section}.host: ")
    assert "must not be empty" in out and "every interface" in out


@pytest.mark.parametrize(
    ("variable", "key"),
    [
        ("PICOBOT_SERVER__HOST", "server.host"),
        ("PICOBOT_CHANNELS__WEBSOCKET__HOST", "channels.websocket.host"),
    ],
)
def test_check_config_refuses_an_empty_host_from_an_unset_shell_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str, key: str
) -> None:
    # PICOBOT_SERVER__HOST="$HOST" with HOST unset: the variable is there, and empty.
    monkeypatch.setenv(variable, "")
    assert main(["check-config"]) == EXIT_CONFIG
    out = capsys.readouterr().err
    assert f"environment: {variable} ({key}): " in out and "must not be empty" in out


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "::1", "localhost", "bot.example.org"])  # noqa: S104
def test_check_config_accepts_hosts_written_out(
    write_config: WriteConfig, capsys: pytest.CaptureFixture[str], host: str
) -> None:
    path = write_config(f'[server]\nhost = "{host}"\n[channels.websocket]\nhost = "{host}"\n')
    assert main(["check-config", str(path)]) == EXIT_OK
