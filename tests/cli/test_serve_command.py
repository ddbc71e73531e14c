"""``picobot serve``'s start-up errors through the CLI: one line and an exit code."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from picobot.cli.main import main


def test_an_unwritable_log_file_is_a_one_line_error(
    write_config: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the log's folder should be", encoding="utf-8")
    write_config(f'[logging]\nfile = "{blocker / "picobot.log"}"\n')
    assert main(["serve"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("picobot: error: cannot write the log file ")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("which", ["websocket", "http"])
def test_a_port_in_use_is_the_same_one_line_error_for_every_listener(
    which: str,
    write_config: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PICOBOT_WS_API_KEYS", "ws-key-0123456789abcdef")
    monkeypatch.setenv("PICOBOT_ADMIN_API_KEYS", "admin-key-0123456789abcdef")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ws_port, http_port = (port, 0) if which == "websocket" else (0, port)
        write_config(
            '[llm]\nprovider = "scripted"\n'
            f"[server]\nport = {http_port}\n"
            f"[channels.websocket]\nenabled = true\nport = {ws_port}\n"
        )
        assert main(["serve"]) == 1
    err = capsys.readouterr().err
    assert "cannot listen on 127.0.0.1:" in err and str(port) in err
    assert "Traceback" not in err
