"""Reliability fixtures: free loopback ports, read-only SQLite inspection, tmpfs mounts,
the webhook's callback receiver.

Everything here is real: real sockets on 127.0.0.1, the real SQLite file read with the
``sqlite3`` module from outside PicoBot's own connections, real tmpfs mounts (skipped,
with the reason, where this process may not mount).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.sealed import opened

if TYPE_CHECKING:
    from .crash_harness import Callback

SAFETY = 60.0
"""Seconds: only a net against hangs, never what a test measures."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def query(
    db_path: Path, sql: str, params: tuple[Any, ...] = (), *, immutable: bool = False
) -> list[tuple[Any, ...]]:
    """Run one read query on its own short-lived connection (another process's view).

    ``immutable`` reads a file nobody may write (on a read-only mount, where SQLite
    cannot create the WAL index it would otherwise need).
    """
    if immutable:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro&immutable=1", uri=True)
    else:
        conn = sqlite3.connect(db_path, timeout=10)
    try:
        with opened(conn, db_path.parent):
            return [tuple(row) for row in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()


def integrity(db_path: Path, *, immutable: bool = False) -> list[str]:
    """``PRAGMA integrity_check`` rows: ``["ok"]`` for a sound database."""
    return [str(r[0]) for r in query(db_path, "PRAGMA integrity_check", immutable=immutable)]


def user_texts(db_path: Path, *, immutable: bool = False) -> list[str]:
    """The content of every stored user message, in id order (duplicates kept)."""
    sql = "SELECT picobot_open(content) FROM messages WHERE role = 'user' ORDER BY id"
    return [str(r[0]) for r in query(db_path, sql, immutable=immutable)]


class Tmpfs:
    """A tmpfs mounted on ``path`` for one test; remount read-only or read-write."""

    def __init__(self, path: Path, mount: str, umount: str) -> None:
        self.path = path
        self._mount = mount
        self._umount = umount

    def remount(self, mode: str) -> None:
        """``mode`` is ``ro`` or ``rw``; raises CalledProcessError if refused."""
        subprocess.run(  # noqa: S603 - absolute path of mount(8), fixed arguments
            [self._mount, "-o", f"remount,{mode}", str(self.path)],
            check=True,
            capture_output=True,
        )

    def unmount(self) -> None:
        """Unmount, lazily if something still holds a file open."""
        done = subprocess.run(  # noqa: S603
            [self._umount, str(self.path)], check=False, capture_output=True
        )
        if done.returncode != 0:
            subprocess.run(  # noqa: S603
                [self._umount, "-l", str(self.path)], check=False, capture_output=True
            )


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size: str) -> Iterator[Tmpfs]:
    """Mount a ``size`` tmpfs on ``path`` or skip the test, naming why."""
    mount, umount = shutil.which("mount"), shutil.which("umount")
    if mount is None or umount is None:
        pytest.skip("mount(8)/umount(8) not found: a real tmpfs cannot be mounted here")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(  # noqa: S603
        [mount, "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        pytest.skip(f"mounting a tmpfs is not permitted here ({reason})")
    fs = Tmpfs(path, mount, umount)
    try:
        yield fs
    finally:
        fs.unmount()


@pytest.fixture
def tmpfs_4m(tmp_path: Path) -> Iterator[Tmpfs]:
    """A 4 MB tmpfs on ``tmp_path/mnt`` (skipped where mounting is not permitted)."""
    with mounted_tmpfs(tmp_path / "mnt", "4m") as fs:
        yield fs


@pytest.fixture(scope="module")
def hypothesis_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point Hypothesis's storage (caches) at a temporary directory for one module.

    The fuzz tests also run with ``database=None``; together nothing lands in the repo.
    """
    from hypothesis import configuration

    home = tmp_path_factory.mktemp("hypothesis")
    configuration.set_hypothesis_home_dir(home)
    try:
        yield home
    finally:
        # None: back to $HYPOTHESIS_STORAGE_DIRECTORY or ./.hypothesis for other tests.
        configuration.set_hypothesis_home_dir(None)


@pytest.fixture
async def callback() -> AsyncIterator[tuple[Callback, str]]:
    """The generic webhook's callback receiver on a loopback port, and its URL."""
    from .crash_harness import Callback  # the harness imports this module

    cb = Callback()
    app = web.Application()
    app.router.add_post("/callback", cb.handle)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield cb, str(server.make_url("/callback"))
    finally:
        cb.release.set()  # held handlers answer (to nobody) so the server can close
        await server.close()
