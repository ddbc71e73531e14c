"""``picobot serve`` as a child process, configured for one replayed conversation.

Each server gets a work directory of its own: a ``config.toml`` (the ``openai``
provider pointed at the stand-in, the WebSocket channel on a free port with one API
key read from an env var, the data dir inside the work directory, no admin API) and
its log. ``PICOBOT_*`` variables of the calling shell are not passed on, so a
developer's environment cannot change what is measured; settings to try are passed
explicitly (``--setting session.memory.recall_budget_tokens=1600``) and recorded in
the results.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from bench.recall.standin import MODEL

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
KEYS_ENV = "PICOBOT_EVAL_WS_KEYS"
_WS_URL = re.compile(r"WebSocket\b.*?(wss?://\S+)")


class ServerError(RuntimeError):
    """The server did not start or stopped unexpectedly; the message names its log."""


def setting_env(setting: str) -> tuple[str, str]:
    """``section.key=value`` as its ``PICOBOT_SECTION__KEY`` variable and value."""
    key, sep, value = setting.partition("=")
    parts = [p.strip() for p in key.split(".")]
    if (
        not sep
        or len(parts) < 2
        or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p) for p in parts)
    ):
        raise ValueError(f"--setting {setting!r}: expected section.key=value")
    return "PICOBOT_" + "__".join(p.upper() for p in parts), value


def _toml(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's


Section = dict[str, str | int | float | bool]


def config_text(data_dir: Path, llm_base_url: str, llm: Section | None = None) -> str:
    """The server's config file; ``llm`` replaces its ``[llm]`` section (the stand-in)."""
    sections: dict[str, Section] = {
        "llm": llm
        or {
            "provider": "openai",
            "base_url": llm_base_url,
            "model": MODEL,
            "api_key_env": "PICOBOT_EVAL_LLM_KEY",
        },
        "data": {"dir": str(data_dir)},
        "channels.websocket": {
            "enabled": True,
            "host": "127.0.0.1",
            "port": 0,
            "api_keys_env": KEYS_ENV,
            # A replay sends thousands of turns a minute from one identity.
            "rate_limit_per_minute": 100_000_000,
        },
        "server": {"port": 0, "enable_admin_api": False, "shutdown_grace_secs": 2.0},
        # The WebSocket URL is read from the start-up lines, logged at INFO.
        "logging": {"level": "INFO"},
    }
    lines = ["# Written by bench.recall for one replayed conversation."]
    for name, values in sections.items():
        lines.append(f"\n[{name}]")
        lines += [f"{key} = {_toml(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def child_env(settings_env: Mapping[str, str]) -> dict[str, str]:
    """A child's environment: the caller's without ``PICOBOT_*``, plus the settings."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("PICOBOT_")}
    env.update(settings_env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


async def run_command(
    workdir: Path,
    config: str,
    args: list[str],
    settings_env: Mapping[str, str] | None = None,
    *,
    log_name: str,
) -> str:
    """``python -m picobot --config F ARGS`` in ``workdir`` with ``config`` as the
    file; its stdout. Its stderr goes to ``log_name``; a non-zero exit raises
    :class:`ServerError` naming that log."""
    path = workdir / f"{log_name}.toml"
    path.write_text(config, encoding="utf-8")
    log_path = workdir / f"{log_name}.log"
    with log_path.open("ab") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "picobot",
            "--config",
            str(path),
            *args,
            cwd=workdir,
            env=child_env(settings_env or {}),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
        )
        out, _ = await proc.communicate()
    if proc.returncode != 0:
        command = " ".join(args[:2])
        raise ServerError(f"picobot {command} exited with {proc.returncode}; see {log_path}")
    return out.decode("utf-8", "replace")


class PicobotServer:
    """``python -m picobot serve`` in ``workdir`` until the ``async with`` ends."""

    def __init__(
        self,
        workdir: Path,
        llm_base_url: str,
        identity: str,
        settings_env: Mapping[str, str] | None = None,
        log_name: str = "picobot.log",
    ) -> None:
        self.workdir = workdir
        self.identity = identity
        self.api_key = f"eval-{secrets.token_hex(16)}"
        self.log_path = workdir / log_name
        self.ws_url = ""
        self._llm_base_url = llm_base_url
        self._settings_env = dict(settings_env or {})
        self._proc: asyncio.subprocess.Process | None = None
        self._drain: asyncio.Task[None] | None = None

    @property
    def settings_env(self) -> dict[str, str]:
        """The ``PICOBOT_*`` settings the server runs with."""
        return dict(self._settings_env)

    async def __aenter__(self) -> PicobotServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "config.toml"
        config.write_text(config_text(self.workdir / "data", self._llm_base_url), encoding="utf-8")
        env = child_env(self._settings_env)
        env[KEYS_ENV] = f"{self.api_key}:{self.identity}"
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "picobot",
            "--config",
            str(config),
            "serve",
            cwd=self.workdir,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        url: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._drain = asyncio.create_task(self._copy_log(self._proc, url))
        try:
            async with asyncio.timeout(START_TIMEOUT):
                self.ws_url = await url
        except BaseException as exc:
            await self._stop()
            if isinstance(exc, TimeoutError):
                raise ServerError(
                    f"picobot serve did not start in time; see {self.log_path}"
                ) from None
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stop()

    async def _copy_log(self, proc: asyncio.subprocess.Process, url: asyncio.Future[str]) -> None:
        """Copy the server's stderr to its log; resolve ``url`` from the start-up line."""
        assert proc.stderr is not None
        with self.log_path.open("wb") as log:
            while line := await proc.stderr.readline():
                log.write(line)
                log.flush()
                match = _WS_URL.search(line.decode("utf-8", "replace"))
                if match and not url.done():
                    url.set_result(match.group(1))
        if not url.done():
            code = await proc.wait()
            tail = self.log_path.read_text(encoding="utf-8", errors="replace").strip()
            last = tail.splitlines()[-1] if tail else "(no output)"
            url.set_exception(
                ServerError(f"picobot serve exited with {code} before listening: {last}")
            )

    @property
    def running(self) -> bool:
        """Whether the child process is still alive."""
        return self._proc is not None and self._proc.returncode is None

    async def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(STOP_TIMEOUT):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if self._drain is not None:
            with contextlib.suppress(Exception):
                await self._drain
            self._drain = None
