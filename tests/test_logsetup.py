"""Logging set-up: secrets never reach the log file."""

from __future__ import annotations

import logging
from pathlib import Path

from picobot.config import Settings
from picobot.logsetup import logging_to


def test_log_file_gets_redacted_records(tmp_path: Path) -> None:
    key = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    path = tmp_path / "picobot.log"
    with logging_to(path, Settings()):
        logging.getLogger("picobot.test").warning("user pasted %s into chat", key)
    text = path.read_text()
    assert "user pasted [REDACTED:github_token] into chat" in text
    assert key not in text
