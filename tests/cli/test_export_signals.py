"""An export ended by any terminating signal leaves no temporary file of personal data.

The exports run as real subprocesses. To stop one mid-export without racing it, its
progress bar writes to a pipe of the smallest size that nobody reads: the bar writes
more than the pipe holds, so the export blocks in the middle, its temporary file half
written, until the test has sent its signal and drains the pipe.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from picobot.cli.data import sweep_stale_temps
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from tests.cli.test_main import REPO, run_picobot

USER = "telegram:1001"
TARGET = "out.jsonl"
PIPE_BYTES = 4096
"""The smallest pipe Linux makes; a 300-message export's bar writes about 6 KB."""


@pytest.fixture
async def stored(db: Database) -> None:
    session = await SessionRepo(db).create("telegram", "c1", USER)
    messages = MessageRepo(db)
    for i in range(300):
        await messages.append(session, "user", f"message {i} " + "words " * 50, 60)


def temps(directory: Path) -> list[Path]:
    return sorted(directory.glob(f".{TARGET}.*.tmp"))


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_")}
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), clean.get("PYTHONPATH")]))
    return clean


def drain(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


@pytest.mark.usefixtures("stored")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_terminated_export_removes_its_temporary_file(tmp_path: Path, sig: int) -> None:
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    proc = subprocess.Popen(  # noqa: S603 - fixed argv, our own interpreter
        [sys.executable, "-m", "picobot", "export", "--user", USER, "-o", TARGET, "--progress"],
        cwd=tmp_path,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=write_end,
    )
    os.close(write_end)
    try:
        # Waiting, not timing: the export cannot finish while its bar's pipe is full.
        deadline = time.monotonic() + 60
        while not temps(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(temps(tmp_path)) == 1 and proc.poll() is None
        proc.send_signal(sig)
        err = drain(read_end).decode()
        status = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert temps(tmp_path) == []
    assert status == 128 + sig, err
    assert not (tmp_path / TARGET).exists()
    assert "Traceback" not in err


@pytest.mark.usefixtures("stored")
def test_an_export_sweeps_what_killed_exports_left(tmp_path: Path) -> None:
    dead_pid = _dead_pid()
    stale = [
        tmp_path / f".{TARGET}.{dead_pid}.a1b2c3d4.tmp",  # its process is gone
        tmp_path / f".{TARGET}.k9_x7q2m.tmp",  # a name without a pid
    ]
    running = tmp_path / f".{TARGET}.{os.getpid()}.zz99yy88.tmp"  # a live export's
    other = tmp_path / f".other.jsonl.{dead_pid}.a1b2c3d4.tmp"  # another target's
    for path in [*stale, running, other]:
        path.write_text("personal data")

    proc = run_picobot("export", "--user", USER, "-o", TARGET, cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert [p for p in stale if p.exists()] == []
    assert running.exists() and other.exists()
    assert (tmp_path / TARGET).read_text().startswith('{"type":"export_header"')


def test_sweeping_a_directory_without_leftovers_removes_nothing(tmp_path: Path) -> None:
    (tmp_path / TARGET).write_text("an earlier export")
    (tmp_path / f".{TARGET}.notatemp").write_text("kept")
    assert sweep_stale_temps(tmp_path / TARGET) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".{TARGET}.notatemp", TARGET]


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid
