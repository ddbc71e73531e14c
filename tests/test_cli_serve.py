"""``picobot serve``'s start-up errors through the CLI: one line and an exit code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from picobot.cli import main


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
