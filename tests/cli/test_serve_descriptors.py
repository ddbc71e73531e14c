"""``picobot serve`` out of file descriptors: a warning at start, and accept errors that
cost one log line a minute instead of a traceback per attempt (42 MB in 30 s before).

A real subprocess whose open-file limit is set low, and real connections from several
loopback addresses (so that no per-peer cap stops them first).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
from pathlib import Path

from tests.cli.test_serve import (
    ADMIN_KEY,
    free_port,
    start_subprocess,
    stop_subprocess,
    wait_healthy,
)

OPEN_FILE_LIMIT = 128
SAFETY = 30.0  # seconds; only a net against hangs


def _low_open_file_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILE_LIMIT, OPEN_FILE_LIMIT))


async def _hold(port: int, peer: str, held: list[asyncio.StreamWriter]) -> None:
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(5):
            _, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(peer, 0))
        held.append(writer)


async def test_accept_errors_when_descriptors_run_out_are_logged_once_a_minute(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PICOBOT_DATA__DIR": str(tmp_path / "data"),
        "PICOBOT_LLM__PROVIDER": "scripted",
        "PICOBOT_SERVER__PORT": str(port),
        "PICOBOT_ADMIN_API_KEYS": ADMIN_KEY,
    }
    # The limit is set in the child before it runs any Python, so no thread exists yet.
    proc = start_subprocess(tmp_path, env, preexec_fn=_low_open_file_limit)
    held: list[asyncio.StreamWriter] = []
    try:
        await wait_healthy(f"http://127.0.0.1:{port}/healthz", proc)
        peers = [f"127.0.0.{n}" for n in range(2, 7)]  # 5 x 40: under the per-peer cap
        await asyncio.gather(*(_hold(port, p, held) for p in peers for _ in range(40)))
        # Accepting now fails (EMFILE); asyncio retries every second. Let it, a while.
        await asyncio.sleep(3)
    finally:
        for writer in held:
            writer.close()
        stderr = await stop_subprocess(proc)
    assert proc.returncode == 0, stderr
    assert f"but the open-file limit is {OPEN_FILE_LIMIT}" in stderr  # warned at start
    assert "socket.accept() out of system resource" not in stderr  # asyncio's traceback
    assert stderr.count("cannot accept connections: [Errno 24] Too many open files") == 1
    summaries = [line for line in stderr.splitlines() if "accept errors: " in line]
    assert len(summaries) == 1 and " more from this process in the last 60s" in summaries[0]
