"""A reader that stops early (``picobot export | head``) ends the command quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from tests.cli.test_main import run_picobot

USER = "telegram:1001"
WORDS = "zebra " * 150  # about 900 characters a message


@pytest.fixture
async def stored(db: Database) -> None:
    session = await SessionRepo(db).create("telegram", "c1", USER)
    messages = MessageRepo(db)
    for i in range(300):  # about 270 KB of export: more than a pipe's buffer holds
        await messages.append(session, "user", f"{i} {WORDS}", 150)


@pytest.mark.usefixtures("stored")
def test_export_into_a_closed_pipe_stops_without_an_error(tmp_path: Path) -> None:
    proc = subprocess.Popen(  # noqa: S603 - fixed argv, our own interpreter
        [sys.executable, "-m", "picobot", "export", "--user", USER],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    head = proc.stdout.read(200)  # as `head -c 200` would, then the reader is gone
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    status = proc.wait(timeout=60)

    assert head.startswith(b'{"type":"export_header"')
    assert err == ""  # no "Broken pipe" error, no "Exception ignored" at exit
    assert status == 141  # 128 + SIGPIPE, what a shell reports for `cat` in that place


def test_a_full_export_still_succeeds_through_the_same_entry_point(tmp_path: Path) -> None:
    # The quiet exit is for a vanished reader only; other failures still speak.
    proc = run_picobot("export", "--user", USER, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == f"picobot: error: no data stored for {USER}\n"
