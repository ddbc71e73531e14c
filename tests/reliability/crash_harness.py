"""The crash test's harness: ``picobot serve`` as a subprocess, its load, its receiver.

:class:`Serve` runs ``python -m picobot serve`` with the WebSocket channel, the generic
webhook and the admin API on free loopback ports; :class:`Callback` is the webhook's
``callback_url``; :func:`ws_client` and :func:`hook_poster` are the load, recording what
was sent and acknowledged in a :class:`Load`; :func:`snapshot` reads what a killed
server left in its SQLite file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.channels.webhook.generic_client import callback_ok, signed_headers

from .conftest import SAFETY, free_port, integrity, query, user_texts

SECRET = "crash-test-webhook-secret"
ADMIN_KEY = "crash-admin-key-0123456789"
WS_CLIENTS = 6
HOOK_CHATS = 4
MAX_TURNS = 3000
"""Turns per WebSocket client and run: a bound on the loop (the kill comes long before)."""
MAX_POSTS = 150
"""Webhooks per chat and run. Posting outruns the turns, so this bounds the backlog the
restarted server has to work off (and so the test's run time), not the load at the kill."""
POLLS = 600
POLL_SECS = 0.05


def ws_key(i: int) -> str:
    return f"crash-ws-key-{i:02d}-0123456789"


@dataclass
class Callback:
    """The generic webhook's callback receiver: counts 200-answered deliveries per message.

    While ``holding`` it keeps each request open without answering (the delivery is in
    flight when the server dies); held requests are never counted as delivered.
    """

    delivered: Counter[str] = field(default_factory=Counter)
    texts: dict[str, list[str]] = field(default_factory=dict)
    bad_signatures: int = 0
    held: int = 0
    holding: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def hold(self) -> None:
        """Stop answering: requests from now on hang until :meth:`resume`."""
        self.holding = True
        self.release = asyncio.Event()

    def resume(self) -> None:
        """Answer again (held requests get 503; their sender is dead by then)."""
        self.holding = False
        self.release.set()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if not callback_ok(request.headers, body, secret=SECRET):
            self.bad_signatures += 1
            return web.json_response({"error": "bad signature"}, status=401)
        if self.holding:
            self.held += 1
            release = self.release
            await release.wait()
            return web.json_response({"error": "held"}, status=503)
        data = json.loads(body)
        mid = str(data["in_reply_to"])
        self.delivered[mid] += 1
        self.texts.setdefault(mid, []).append(str(data["text"]))
        self.changed.set()
        self.changed = asyncio.Event()
        return web.json_response({"ok": True})

    async def wait_for(self, ids: set[str]) -> None:
        """Until every id in ``ids`` was delivered at least once."""
        while not ids <= set(self.delivered):
            await self.changed.wait()


class Serve:
    """``python -m picobot serve`` as a subprocess; output goes to ``NAME-N.log``. Two
    of them on one ``tmp_path`` are two instances on one data directory."""

    def __init__(self, tmp_path: Path, callback_url: str, name: str = "serve") -> None:
        self.tmp_path = tmp_path
        self.name = name
        self.http_port = free_port()
        self.ws_port = free_port()
        self.db_path = tmp_path / "data" / "conversations.db"
        keys = ",".join(f"{ws_key(i)}:client{i}" for i in range(WS_CLIENTS))
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.upper().startswith("PICOBOT_")},
            "PICOBOT_LLM__PROVIDER": "scripted",
            "PICOBOT_DATA__DIR": str(tmp_path / "data"),
            "PICOBOT_SERVER__PORT": str(self.http_port),
            "PICOBOT_SERVER__SHUTDOWN_GRACE_SECS": "5",
            "PICOBOT_ADMIN_API_KEYS": ADMIN_KEY,
            "PICOBOT_CHANNELS__WEBSOCKET__ENABLED": "true",
            "PICOBOT_CHANNELS__WEBSOCKET__PORT": str(self.ws_port),
            "PICOBOT_CHANNELS__WEBSOCKET__RATE_LIMIT_PER_MINUTE": "1000000",
            "PICOBOT_WS_API_KEYS": keys,
            "PICOBOT_CHANNELS__WEBHOOK__GENERIC__ENABLED": "true",
            "PICOBOT_CHANNELS__WEBHOOK__GENERIC__CALLBACK_URL": callback_url,
            "PICOBOT_GENERIC_WEBHOOK_SECRET": SECRET,
        }
        self.proc: asyncio.subprocess.Process | None = None
        self.runs = 0

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.ws_port}/ws"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def hook_url(self) -> str:
        return f"{self.http_url}/webhooks/generic"

    def log_tail(self) -> str:
        text = "".join(
            p.read_text(errors="replace") for p in sorted(self.tmp_path.glob(f"{self.name}-*.log"))
        )
        return text[-6000:]

    async def start(self, http: aiohttp.ClientSession) -> None:
        """Start the server and wait (bounded) until /healthz answers 200."""
        self.runs += 1
        with (self.tmp_path / f"{self.name}-{self.runs}.log").open("wb") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "picobot",
                "serve",
                cwd=self.tmp_path,
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
            )
        for _ in range(POLLS):
            if self.proc.returncode is not None:
                pytest.fail(f"serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(aiohttp.ClientError):
                url = f"http://127.0.0.1:{self.http_port}/healthz"
                async with http.get(url) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(POLL_SECS)
        pytest.fail(f"serve never became healthy:\n{self.log_tail()}")

    async def wait(self) -> int:
        assert self.proc is not None
        async with asyncio.timeout(SAFETY):
            return await self.proc.wait()

    async def kill(self) -> None:
        """Make sure no server outlives the test."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.wait()


@dataclass
class Load:
    """One run of load until a kill: what was sent, acknowledged, and any error before."""

    cycle: int
    killed: bool = False
    ws_sent: set[str] = field(default_factory=set)
    ws_acked: set[str] = field(default_factory=set)
    hook_sent: dict[str, str] = field(default_factory=dict)
    """message_id -> text of every webhook POSTed (answered or not)."""
    hook_acked: dict[str, str] = field(default_factory=dict)
    """message_id -> text of every webhook answered 200."""
    errors: list[str] = field(default_factory=list)
    progress: asyncio.Event = field(default_factory=asyncio.Event)

    def note(self) -> None:
        self.progress.set()
        self.progress = asyncio.Event()

    async def until(self, predicate: Any) -> None:
        while not predicate():
            await self.progress.wait()


async def ws_client(serve: Serve, i: int, load: Load) -> None:
    """Chat in a loop; a message counts as acknowledged at its first token or done."""
    headers = {"Authorization": f"Bearer {ws_key(i)}"}
    try:
        async with connect(serve.ws_url, additional_headers=headers) as ws:
            hello = json.loads(await ws.recv())
            assert hello["type"] == "hello"
            for n in range(MAX_TURNS):
                rid = f"r{load.cycle}-{i}-{n}"
                text = f"websocket run {load.cycle} client {i} turn {n}"
                load.ws_sent.add(text)
                await ws.send(json.dumps({"type": "chat", "text": text, "id": rid}))
                while True:
                    frame = json.loads(await ws.recv())
                    if frame.get("reply_to") != rid:
                        load.errors.append(f"unexpected frame {frame}")
                        continue
                    if frame["type"] in ("token", "done") and text not in load.ws_acked:
                        load.ws_acked.add(text)
                        load.note()
                    elif frame["type"] == "error":
                        load.errors.append(f"ws error {frame}")
                    elif frame["type"] == "end":
                        break
    except (ConnectionClosed, OSError) as exc:
        if not load.killed:
            load.errors.append(f"ws client {i}: {exc!r}")


async def hook_poster(serve: Serve, http: aiohttp.ClientSession, chat: int, load: Load) -> None:
    """POST signed messages of one chat in a loop; a 200 is an acknowledgement."""
    for n in range(MAX_POSTS):
        mid = f"m{load.cycle}-{chat}-{n}"
        text = f"webhook run {load.cycle} chat {chat} message {n}"
        payload = {"user": f"user{chat}", "chat": f"chat{chat}", "text": text, "message_id": mid}
        body = json.dumps(payload).encode()
        headers = signed_headers(body, secret=SECRET)
        load.hook_sent[mid] = text
        try:
            async with http.post(serve.hook_url, data=body, headers=headers) as resp:
                await resp.read()
                status = resp.status
        except (aiohttp.ClientError, OSError) as exc:
            if not load.killed:
                load.errors.append(f"webhook chat {chat}: {exc!r}")
            return
        if status == 200:
            load.hook_acked[mid] = text
            load.note()
        elif not load.killed:
            load.errors.append(f"webhook {mid} answered {status}")
        if load.killed:
            return


@dataclass(frozen=True)
class Snapshot:
    """What a killed server left on disk, read before anything opens the file again."""

    integrity: list[str]
    user_texts: list[str]
    inbox: set[str]
    interrupted: set[str]
    """Inbox messages whose turn had started but not finished: they run again."""
    pending_replies: set[str]
    """in_reply_to of every reply still queued."""


def snapshot(db_path: Path) -> Snapshot:
    outbound = query(db_path, "SELECT reply_to_json FROM outbound_queue WHERE status = 'pending'")
    # The inbox keys a generic message by user, chat and id; the id as sent is in_reply_to.
    inbox = query(db_path, "SELECT reply_to_json, status, attempts FROM webhook_inbox")
    return Snapshot(
        integrity=integrity(db_path),
        user_texts=user_texts(db_path),
        inbox={_sent_id(r[0]) for r in inbox},
        interrupted={_sent_id(r[0]) for r in inbox if r[1] == "pending" and r[2] > 0},
        pending_replies={_sent_id(r[0]) for r in outbound},
    )


def _sent_id(reply_to_json: str) -> str:
    """The message_id a generic webhook was POSTed with, from a row's reply_to_json."""
    return str(json.loads(reply_to_json)["in_reply_to"])


def pending_replies(db_path: Path) -> int:
    rows = query(db_path, "SELECT COUNT(*) FROM outbound_queue WHERE status = 'pending'")
    return int(rows[0][0])


def pending_work(db_path: Path) -> int:
    rows = query(
        db_path,
        "SELECT (SELECT COUNT(*) FROM outbound_queue WHERE status = 'pending')"
        " + (SELECT COUNT(*) FROM webhook_inbox WHERE status = 'pending')",
    )
    return int(rows[0][0])


async def poll_db(db_path: Path, predicate: Any, what: str, serve: Serve) -> None:
    """Bounded poll of the database from outside the server until ``predicate`` holds."""
    for _ in range(POLLS):
        if await asyncio.to_thread(predicate, db_path):
            return
        await asyncio.sleep(POLL_SECS)
    pytest.fail(f"never reached: {what}\n{serve.log_tail()}")
