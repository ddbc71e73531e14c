"""A Python script run in a child process and killed with SIGKILL at a point it names."""

from __future__ import annotations

import asyncio
import os
import signal
import sys


async def kill_when_ready(script: str, *args: str, ready: bytes) -> None:
    """Run ``script`` (``python -c``) with ``args``; once it prints the line ``ready``,
    kill it with SIGKILL (no cleanup of any kind runs) and wait for it to be gone."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        *args,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), 60) == ready + b"\n"
    os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()
