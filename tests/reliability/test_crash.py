"""``picobot serve`` killed with SIGKILL under load, then restarted on the same data dir.

Real: the server is ``python -m picobot serve`` in its own process (WebSocket channel,
generic webhook, admin API ``/healthz``), the SQLite file, the loopback TCP traffic,
the WebSocket clients, the signed webhook POSTs, the SIGKILL (no shutdown code runs)
and the restart. Stand-ins: the model is the scripted provider (it echoes), and the
generic webhook's ``callback_url`` is an aiohttp server in this test that records every
reply it receives.

What "acknowledged" means, from the client's side:

- webhook: the POST was answered 200. The core commits the message to its inbox before
  answering, so a 200 promises the message is stored and will be answered.
- WebSocket: a ``token`` or ``done`` frame answering the message. The kernel commits
  the user's message before it calls the model, and tokens only come from the model,
  so the first token proves the commit. (The ``session`` frame before them is sent
  once the message is stored too; the test counts only the later frames.)

The server is killed twice, the second time while the restarted server is still
working off the backlog the first kill left, then restarted cleanly, drained and
stopped with SIGTERM. Asserted: every acknowledged message is in the file after each
kill and after the end, ``PRAGMA integrity_check`` is ok every time, every reply
queued at a kill is delivered after it, and no reply is delivered twice unless the
receiver had answered it 200 while the file still had it queued when the server died
(the at-least-once window documented in ``channels/webhook/server.py``). A WebSocket
message is stored exactly once, and so is a webhook message, even when a kill cut its
turn short after the message was committed (its turn runs again on restart and finds
the message, and a reply already stored, by the platform's message id).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from .conftest import SAFETY, integrity, user_texts
from .crash_harness import (
    HOOK_CHATS,
    WS_CLIENTS,
    Callback,
    Load,
    Serve,
    Snapshot,
    hook_poster,
    pending_replies,
    pending_work,
    poll_db,
    snapshot,
    ws_client,
)

WARM_WS_ACKS = 60
WARM_DELIVERIES = 20
QUEUED_AT_KILL = 12
"""Replies pending in the outbound queue when the server is killed."""
CRASHES = 2


@dataclass
class Kill:
    """One SIGKILL: the load before it, the file after it, what the receiver had seen."""

    load: Load
    after: Snapshot
    delivered_before: Counter[str]
    window: set[str]
    """Replies answered 200 by the receiver but still queued in the file: the documented
    at-least-once window (the server died between the platform's 200 and recording it)."""


async def load_and_kill(
    serve: Serve, http: aiohttp.ClientSession, cb: Callback, cycle: int
) -> Kill:
    """Start the server, drive both channels, stall the receiver, SIGKILL mid-load."""
    await serve.start(http)
    load = Load(cycle)
    tasks = [asyncio.create_task(ws_client(serve, i, load)) for i in range(WS_CLIENTS)]
    tasks += [asyncio.create_task(hook_poster(serve, http, c, load)) for c in range(HOOK_CHATS)]
    try:
        async with asyncio.timeout(SAFETY):
            # Warm up: turns answered on both channels and replies delivered.
            await load.until(
                lambda: (
                    len(load.ws_acked) >= WARM_WS_ACKS and len(load.hook_acked) >= WARM_DELIVERIES
                )
            )
            await cb.wait_for(set(list(load.hook_acked)[:WARM_DELIVERIES]))
            # Then the receiver stops answering: replies pile up in the durable queue
            # while both channels keep taking messages.
            cb.hold()
        await poll_db(
            serve.db_path,
            lambda p: pending_replies(p) >= QUEUED_AT_KILL,
            f"{QUEUED_AT_KILL} replies queued",
            serve,
        )
        assert not load.errors, load.errors
        load.killed = True
        assert serve.proc is not None
        os.kill(serve.proc.pid, signal.SIGKILL)
        assert await serve.wait() == -signal.SIGKILL
        async with asyncio.timeout(SAFETY):
            await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert not load.errors, load.errors
    after = await asyncio.to_thread(snapshot, serve.db_path)
    window = set(cb.delivered) & after.pending_replies
    return Kill(load, after, Counter(cb.delivered), window)


async def test_sigkill_under_load_loses_nothing_acknowledged(
    tmp_path: Path, callback: tuple[Callback, str]
) -> None:
    """Two SIGKILLs, the second while the restarted server is still working off the
    backlog the first one left; then a clean restart, drain and SIGTERM."""
    cb, callback_url = callback
    serve = Serve(tmp_path, callback_url)
    kills: list[Kill] = []
    async with aiohttp.ClientSession() as http:
        try:
            for cycle in range(CRASHES):
                kill = await load_and_kill(serve, http, cb, cycle)
                kills.append(kill)
                # The file the killed server left: sound, holding every acknowledged
                # message, with replies still queued.
                after = kill.after
                assert after.integrity == ["ok"]
                missing = kill.load.ws_acked - set(after.user_texts)
                assert not missing, f"acknowledged over WebSocket but not stored: {missing}"
                assert set(kill.load.hook_acked) <= after.inbox
                assert len(after.pending_replies) >= QUEUED_AT_KILL
                cb.resume()
            # Restart on the same data dir and let it work everything off.
            await serve.start(http)
            acked = {mid for k in kills for mid in k.load.hook_acked}
            queued = {mid for k in kills for mid in k.after.pending_replies}
            async with asyncio.timeout(SAFETY):
                await cb.wait_for(acked | queued)
            await poll_db(serve.db_path, lambda p: pending_work(p) == 0, "queues drained", serve)
            assert serve.proc is not None
            serve.proc.send_signal(signal.SIGTERM)
            assert await serve.wait() == 0, serve.log_tail()
        finally:
            await serve.kill()

    windows = Counter(mid for k in kills for mid in k.window)
    twice = {mid: n for mid, n in cb.delivered.items() if n > 1}
    beyond = {mid: n for mid, n in twice.items() if n > 1 + windows[mid]}
    assert not beyond, (
        f"delivered more often than the at-least-once window explains: {beyond}; "
        f"windows (200 given, not yet recorded at a kill): {dict(windows)}"
    )
    assert cb.bad_signatures == 0
    hook_sent = {mid: text for k in kills for mid, text in k.load.hook_sent.items()}
    for mid in cb.delivered:
        assert mid in hook_sent, f"a reply to a message never sent: {mid}"
        assert set(cb.texts[mid]) == {f"You said: {hook_sent[mid]}"}, mid
    # Every acknowledged webhook was answered; every reply queued at a kill went out
    # after it, exactly once unless the window explains a second time.
    assert acked <= set(cb.delivered)
    for k in kills:
        for mid in k.after.pending_replies - k.window:
            assert k.delivered_before[mid] == 0, mid
            assert cb.delivered[mid] == 1 + windows[mid], mid
    stored = Counter(user_texts(serve.db_path))
    ws_sent = set().union(*(k.load.ws_sent for k in kills))
    ws_acked = set().union(*(k.load.ws_acked for k in kills))
    assert ws_acked <= set(stored)
    # A WebSocket message is never run twice. A webhook message whose turn a kill cut
    # short runs again on restart, and finds its text (and any reply) already stored.
    assert all(stored[text] == 1 for text in ws_sent & set(stored))
    interrupted = {mid for k in kills for mid in k.after.interrupted}
    twice_stored = {mid: stored[text] for mid, text in hook_sent.items() if stored[text] > 1}
    assert not twice_stored, f"stored more than once: {twice_stored}; re-run: {interrupted}"
    assert {hook_sent[mid] for mid in acked} <= set(stored)
    assert integrity(serve.db_path) == ["ok"]
