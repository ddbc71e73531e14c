"""``picobot serve`` polling Telegram, killed with SIGKILL, restarted: nothing lost or repeated.

A real process against the Bot API stand-in, three runs on one data directory: the
first is killed while it holds a long poll after storing a batch (its offset must
survive: that batch is never served again), the second the moment the stand-in hands
it a batch (stored with its offset or not at all: served again at most, and then
de-duplicated), the third answers everything and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

from tests.channels.webhook.telegram_api import TelegramAPI, telegram_api
from tests.cli.test_serve import start_subprocess, stop_subprocess
from tests.sealed import opened

BOT_TOKEN = "31337:crash-test-token-0123456789abcdef"
USER = 4440001
WAIT = 60.0
ROOT = Path(__file__).resolve().parents[3]


def environment(tmp_path: Path, api: TelegramAPI) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_")}
    return env | {
        "PYTHONPATH": str(ROOT),  # this checkout, whatever the working directory
        "PICOBOT_DATA__DIR": str(tmp_path / "data"),
        "PICOBOT_LLM__PROVIDER": "scripted",
        "PICOBOT_CHANNELS__WEBHOOK__TELEGRAM__ENABLED": "true",
        "PICOBOT_CHANNELS__WEBHOOK__TELEGRAM__MODE": "polling",
        "PICOBOT_CHANNELS__WEBHOOK__TELEGRAM__API_BASE_URL": api.base_url,
        "PICOBOT_CHANNELS__WEBHOOK__TELEGRAM__POLL_TIMEOUT_SECS": "2",
        "PICOBOT_TELEGRAM_BOT_TOKEN": BOT_TOKEN,
    }


async def until(api: TelegramAPI, proc: subprocess.Popen[bytes], predicate: Any) -> None:
    """Wait until ``predicate(api)`` holds; fail at once if ``proc`` exits first."""
    waiter = asyncio.ensure_future(api.wait(predicate))
    exited = asyncio.ensure_future(asyncio.to_thread(proc.wait, WAIT))
    try:
        done, _ = await asyncio.wait({waiter, exited}, timeout=WAIT, return_when="FIRST_COMPLETED")
    finally:
        waiter.cancel()
    assert waiter in done, f"picobot serve exited ({proc.poll()}) or timed out first"


async def killed(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` (if it still runs), reap it and close its pipe."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    await asyncio.to_thread(proc.communicate, None, WAIT)
    assert proc.returncode == -signal.SIGKILL


async def test_sigkill_while_polling_loses_and_repeats_nothing(tmp_path: Path) -> None:
    async with telegram_api(BOT_TOKEN) as api:
        env = environment(tmp_path, api)
        texts = [f"note number {n}" for n in range(7)]

        # Run 1: a batch is stored (the next poll asks past it), then SIGKILL mid-poll.
        first = [api.push(t, user=USER, chat=USER, message_id=n) for n, t in enumerate(texts[:3])]
        proc = start_subprocess(tmp_path, env, start_new_session=True)
        try:
            stored = first[-1] + 1
            await until(api, proc, lambda a: any(p.get("offset") == stored for p in a.polls()))
        finally:
            await killed(proc)
        after_first = len(api.polls())

        # Run 2: SIGKILL the moment a batch is handed over.
        for n, t in enumerate(texts[3:6], start=3):
            api.push(t, user=USER, chat=USER, message_id=n)
        proc = start_subprocess(tmp_path, env, start_new_session=True)
        api.after_serving = lambda ids: os.kill(proc.pid, signal.SIGKILL)
        try:
            await asyncio.to_thread(proc.wait, WAIT)
        finally:
            api.after_serving = None
            await killed(proc)

        # Run 3: everything is answered; SIGTERM stops it cleanly.
        api.push(texts[6], user=USER, chat=USER, message_id=6)
        proc = start_subprocess(tmp_path, env)
        try:
            wanted = {f"You said: {t}" for t in texts}
            await until(api, proc, lambda a: wanted <= {m["text"] for m in a.sent})
        finally:
            stderr = await stop_subprocess(proc)
        assert proc.returncode == 0, stderr
        assert "stopped" in stderr and BOT_TOKEN not in stderr

        # The batch stored before the first kill was never served again.
        assert all(api.served.count(u) == 1 for u in first)
        # The restart after the first kill asked from the saved offset, not from scratch.
        assert all(p.get("offset", 0) >= stored for p in api.polls()[after_first:])

    with closing(sqlite3.connect(tmp_path / "data" / "conversations.db")) as db:
        inbox = db.execute("SELECT message_id, status FROM webhook_inbox ORDER BY id").fetchall()
        with opened(db, tmp_path / "data"):
            said = db.execute("SELECT picobot_open(content) FROM messages WHERE role = 'user'")
            said = said.fetchall()
    assert sorted(m for m, _ in inbox) == sorted(f"{USER}:{n}" for n in range(7))
    assert {s for _, s in inbox} == {"done"}
    assert sorted(c for (c,) in said) == sorted(texts)  # each turn ran once
