"""A throwaway PostgreSQL cluster for tests and developers, and fresh databases in it.

``Cluster.start()`` runs ``initdb`` into a new temporary directory and starts the server
with ``pg_ctl``, listening only on 127.0.0.1 (a free port) and on a unix socket inside
that directory, tuned for tests (no fsync, no synchronous commit). ``stop()`` ends the
server and deletes the directory. No shared or system cluster is ever used or touched.

PostgreSQL refuses to run as root: as root, the server commands run as the ``postgres``
system user (else ``nobody``), which then owns the temporary directory.

``python -m tests.pg.cluster`` starts one for a developer, prints its URL as
``PICOBOT_TEST_POSTGRES=...`` and keeps it until Ctrl-C, SIGTERM or SIGHUP.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, TracebackType
from typing import Self
from urllib.parse import urlsplit, urlunsplit

SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")
SUPERUSER = "postgres"
# Settings for a disposable test server: durability off (the data is thrown away),
# small shared memory, room for many pooled connections.
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "200",
    "shared_buffers": "32MB",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}
# A unix socket path must fit in sockaddr_un.sun_path (107 bytes on Linux).
MAX_SOCKET_PATH = 107
START_ATTEMPTS = 3
TIMEOUT = 60


class ClusterError(RuntimeError):
    """A server command failed; the message holds its output and the server log's tail."""


def _has_server_binaries(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in SERVER_BINARIES)


def _version_key(directory: Path) -> tuple[int, ...]:
    """``/usr/lib/postgresql/15/bin`` -> (15,), so 9.6 < 10 < 15."""
    return tuple(int(part) for part in re.findall(r"\d+", directory.parent.name))


def find_bindir() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None if none does.

    Looks at ``$PICOBOT_PG_BINDIR`` (which, when set, must hold them: ClusterError
    otherwise), then ``pg_config --bindir``, the newest ``/usr/lib/postgresql/*/bin``
    (Debian's layout, not on PATH), then ``initdb`` on PATH (symlinks followed).
    """
    explicit = os.environ.get("PICOBOT_PG_BINDIR")
    if explicit:
        if not _has_server_binaries(Path(explicit)):
            raise ClusterError(f"PICOBOT_PG_BINDIR={explicit} lacks {', '.join(SERVER_BINARIES)}")
        return Path(explicit)
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        # Debian's pg_config reports the libpq-dev version's directory, which may have
        # no server in it: checked like any other candidate.
        done = subprocess.run(  # noqa: S603 - fixed argv, pg_config from PATH
            [pg_config, "--bindir"], capture_output=True, text=True, check=False, timeout=TIMEOUT
        )
        if done.returncode == 0 and _has_server_binaries(Path(done.stdout.strip())):
            return Path(done.stdout.strip())
    debian = [d for d in Path("/usr/lib/postgresql").glob("*/bin") if _has_server_binaries(d)]
    if debian:
        return max(debian, key=_version_key)
    initdb = shutil.which("initdb")
    if initdb is not None and _has_server_binaries(Path(initdb).resolve().parent):
        return Path(initdb).resolve().parent
    return None


def _server_account() -> pwd.struct_passwd | None:
    """The unprivileged account the server commands run as, or None to run them as we are."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise ClusterError("running as root, and there is neither a postgres nor a nobody user")


def _as_account(account: pwd.struct_passwd | None, command: list[str]) -> list[str]:
    """``command`` run as ``account`` (setpriv, else runuser), or unchanged for None."""
    if account is None:
        return command
    if shutil.which("setpriv") is not None:
        ids = [f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups"]
        return ["setpriv", *ids, "--", *command]
    if shutil.which("runuser") is not None:
        return ["runuser", "-u", account.pw_name, "--", *command]
    raise ClusterError("running as root, and neither setpriv nor runuser is available")


def _check_reachable(directory: Path, account: pwd.struct_passwd) -> None:
    """Raise ClusterError unless ``account`` may enter every directory above ``directory``."""
    for parent in directory.parents:
        mode = parent.stat()
        if not mode.st_mode & stat.S_IXOTH and mode.st_uid != account.pw_uid:
            raise ClusterError(
                f"user {account.pw_name} cannot enter {parent}: "
                "set TMPDIR to a directory that user can reach"
            )


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the server may still lose it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _server_env() -> dict[str, str]:
    """Our environment without PG* variables (PGDATA, PGPORT... must not steer the server)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"LC_ALL": "C"}


class Cluster:
    """A running throwaway cluster; ``stop()`` (or leaving ``with``) ends and deletes it.

    ``url`` connects as the superuser ``postgres`` over TCP to the ``postgres`` database;
    ``socket_dir`` holds its unix socket, ``data_dir`` its data, both under ``directory``.
    """

    def __init__(
        self, bindir: Path, directory: Path, account: pwd.struct_passwd | None, port: int
    ) -> None:
        self.bindir = bindir
        self.directory = directory
        self.account = account
        self.port = port
        self.url = f"postgresql://{SUPERUSER}@127.0.0.1:{port}/postgres"
        self._stopped = False

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def socket_dir(self) -> Path:
        return self.directory

    @property
    def log_file(self) -> Path:
        return self.directory / "server.log"

    @classmethod
    def start(cls, bindir: Path | None = None) -> Self:
        """Create and start a cluster (``bindir`` defaults to ``find_bindir()``).

        Raises ClusterError when no server binaries are found or a server command fails;
        nothing is left behind then. Also stopped at interpreter exit if still running.
        """
        if bindir is None:
            bindir = find_bindir()
            if bindir is None:
                raise ClusterError("no PostgreSQL server binaries (initdb, pg_ctl, postgres)")
        account = _server_account()
        directory = Path(tempfile.mkdtemp(prefix="picobot-pg-"))
        cluster = cls(bindir, directory, account, port=0)
        try:
            if account is not None:
                _check_reachable(directory, account)
                os.chown(directory, account.pw_uid, account.pw_gid)
            socket_path = directory / ".s.PGSQL.65535.lock"
            if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH:
                raise ClusterError(f"{directory} is too long a path for a unix socket")
            cluster._initdb()
            cluster._start_server()
        except BaseException:
            cluster.stop()
            raise
        atexit.register(cluster.stop)
        return cluster

    def _run(self, *command: str) -> subprocess.CompletedProcess[str]:
        """Run a server binary as the server's account; ClusterError if it fails."""
        argv = _as_account(self.account, [str(self.bindir / command[0]), *command[1:]])
        done = subprocess.run(  # noqa: S603 - a server binary, arguments of our own
            argv,
            cwd=self.directory,  # the server's account may not enter ours
            env=_server_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=TIMEOUT + 30,
        )
        if done.returncode != 0:
            raise ClusterError(
                f"{' '.join(argv)} exited with {done.returncode}:\n"
                f"{done.stdout}{done.stderr}{self._log_tail()}"
            )
        return done

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "server log:\n" + "\n".join(text.splitlines()[-lines:])

    def _initdb(self) -> None:
        self._run(
            "initdb",
            f"--pgdata={self.data_dir}",
            f"--username={SUPERUSER}",
            "--auth-local=trust",
            "--auth-host=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        settings = {**SETTINGS, "unix_socket_directories": f"'{self.socket_dir}'"}
        with (self.data_dir / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n# tests/pg/cluster.py\n")
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())

    def _start_server(self) -> None:
        """Start on a free port; another pick if a process took it meanwhile."""
        for attempt in range(START_ATTEMPTS):
            self.port = _free_port()
            self.url = f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"
            try:
                self._run(
                    "pg_ctl",
                    "start",
                    f"--pgdata={self.data_dir}",
                    f"--log={self.log_file}",
                    f"--options=-p {self.port}",
                    "--wait",
                    f"--timeout={TIMEOUT}",
                )
                return
            except ClusterError as error:
                if "Address already in use" not in str(error) or attempt + 1 == START_ATTEMPTS:
                    raise

    def _postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def stop(self) -> None:
        """Stop the server (immediate mode) and delete the directory; later calls do nothing."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        try:
            pid = self._postmaster_pid()
            if pid is not None:
                try:
                    self._run("pg_ctl", "stop", f"--pgdata={self.data_dir}", "--mode=immediate")
                except (ClusterError, subprocess.TimeoutExpired):
                    _kill(pid)
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited: a zombie (an exited postmaster
    that init has yet to reap, as pg_ctl leaves it to init) does not count."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: all that is known is whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat_line.rpartition(")")[2].split()[0] != "Z"


def _kill(pid: int) -> None:
    """End a postmaster that pg_ctl could not stop: SIGQUIT, then SIGKILL after 10 s."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + 10
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def _with_database(url: str, name: str) -> str:
    """``url`` with its database (the path) replaced by ``name``."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"not a postgresql:// URL: {url!r}")
    return urlunsplit(parts._replace(path="/" + name))


def database_name(url: str) -> str:
    """The database a ``postgresql://`` URL names."""
    return urlsplit(url).path.lstrip("/")


def create_database(server_url: str) -> str:
    """Create a new, empty, uniquely named database (from template0); return its URL.

    ``server_url`` names a database to connect to for the CREATE as a role that may
    create databases. Needs psycopg (the ``postgres`` extra).
    """
    import psycopg
    from psycopg import sql

    name = f"picobot_test_{uuid.uuid4().hex}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    return _with_database(server_url, name)


def drop_database(server_url: str, database_url: str) -> None:
    """Drop the database ``database_url`` names, closing its connections; gone is fine."""
    import psycopg
    from psycopg import sql

    name = sql.Identifier(database_name(database_url))
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))


@contextlib.contextmanager
def temporary_database(server_url: str) -> Iterator[str]:
    """The URL of a new empty database on ``server_url``'s server, dropped on exit."""
    url = create_database(server_url)
    try:
        yield url
    finally:
        drop_database(server_url, url)


def main() -> int:
    """Start a cluster, print its URL, and keep it until SIGINT, SIGTERM or SIGHUP."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGHUP: terminal closed
        signal.signal(signum, on_signal)
    started = time.monotonic()
    try:
        cluster = Cluster.start()
    except ClusterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    with cluster:
        print(f"PICOBOT_TEST_POSTGRES={cluster.url}")
        print(f"data directory: {cluster.data_dir} (deleted on exit)")
        print(f"started in {time.monotonic() - started:.1f} s; Ctrl-C stops it", flush=True)
        stop.wait()
    print("stopped and deleted", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
