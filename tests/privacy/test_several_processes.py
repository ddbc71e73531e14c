"""Several processes on one data directory: a purge by one leaves what every other keeps
in memory (prompt epochs, memory lists, a model's kept prompts, cached user keys) within
a second, and no process seals or opens text with a key another one deleted."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from picobot.config.settings import Settings
from picobot.kernel.prompt.retriever import MemoryRetriever
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound
from picobot.privacy.controller import PrivacyController
from picobot.privacy.scopes import Actor, SessionScope
from picobot.runtime import Runtime, open_database, open_runtime
from picobot.store.keys.keyring import KEY_STORE_FILE
from picobot.store.retrieval.search import SearchIndex
from picobot.text import tokens
from tests.privacy.test_erasure import scan

ALICE = Identity("tui", "tui:alice", "local")
BOB = Identity("tui", "tui:bob", "local")
OPERATOR = Actor("operator:cli", operator=True)
DEADLINE_SECS = 1.0
"""The guarantee (docs/privacy.md#several-processes): within a second of the purge."""


class KeepingModel(ScriptedProvider):
    """The scripted model with the hook of a model that keeps evaluated prompts."""

    def __init__(self) -> None:
        super().__init__()
        self.forgotten = 0

    def forget_prompts(self) -> int:
        self.forgotten += 1
        return 0


def settings_for(tmp_path: Path) -> Settings:
    # The CLI below runs in tmp_path with no config: its data directory is ./data too.
    return Settings(data={"dir": str(tmp_path / "data")})


@pytest.fixture
async def model() -> KeepingModel:
    return KeepingModel()


@pytest.fixture
async def rt(tmp_path: Path, model: KeepingModel) -> AsyncIterator[Runtime]:
    async with open_runtime(settings_for(tmp_path), provider=model) as runtime:
        yield runtime


async def say(rt: Runtime, who: Identity, text: str) -> str | None:
    """Send ``text`` as ``who``; the session it went to (None for a command)."""
    events = [e async for e in rt.kernel.handle(Inbound(who, text))]
    return events[-1].session_id


def held(rt: Runtime) -> str:
    """Everything the runtime keeps of prompts in memory, as text to look for words in."""
    retriever = rt.kernel.retriever
    assert isinstance(retriever, MemoryRetriever)
    return (
        repr(dict(retriever._epochs))
        + repr(dict(retriever.memory_cache._entries))
        + repr(dict(retriever.fact_cache._entries))
    )


async def gone_within(rt: Runtime, words: list[str], started: float) -> float:
    """Seconds from ``started`` until none of ``words`` is kept by ``rt`` (fails past the
    deadline)."""
    while True:
        kept = [w for w in words if w in held(rt)]
        elapsed = time.monotonic() - started
        if not kept:
            return elapsed
        assert elapsed < DEADLINE_SECS, f"still kept after {elapsed:.2f}s: {kept}"
        await asyncio.sleep(0.02)


def key_id(sealed: object) -> int:
    assert isinstance(sealed, bytes)
    return int.from_bytes(sealed[1:9], "big")


async def contents(rt: Runtime, user_id: str) -> list[tuple[int, str]]:
    """Each stored message of ``user_id``: the id of the key that sealed it, and its text
    as this process reads it."""
    rows = await rt.db.fetchall(
        "SELECT m.content, picobot_open(m.content) FROM messages m"
        " JOIN sessions s ON s.id = m.session_id WHERE s.user_id = ? ORDER BY m.id",
        (user_id,),
    )
    return [(key_id(row[0]), str(row[1])) for row in rows]


async def test_a_cli_purge_leaves_a_running_server_within_a_second(
    tmp_path: Path, rt: Runtime, model: KeepingModel
) -> None:
    data = tmp_path / "data"
    await say(rt, ALICE, "/remember dentist: Doctor Quokkaberg")
    await say(rt, ALICE, "my bike lock code is Wombatine")
    await say(rt, BOB, "bob likes Platypodium")
    await SearchIndex(rt.db).index_pending(None)  # the background indexer, now
    await say(rt, ALICE, "/new")
    await say(rt, ALICE, "what was the code, Wombatine?")
    # Kept in memory: her note (memory lists, the epoch's notes) and what was recalled.
    words = ["Doctor Quokkaberg", "my bike lock code is Wombatine"]
    assert all(w in held(rt) for w in words)  # what the purge must take out of memory
    (old_kid, _), *_ = await contents(rt, ALICE.user_id)
    with sqlite3.connect(data / KEY_STORE_FILE) as keys:
        (wrapped,) = keys.execute(
            "SELECT wrapped FROM user_keys WHERE user_id = ?", (ALICE.user_id,)
        ).fetchone()
    forgotten = model.forgotten
    estimates = len(tokens._script_estimate)  # keyed by the texts' hashes

    # Another process: `picobot purge user` on the same data directory, while this
    # server keeps running (its event loop, and so its watch, goes on meanwhile).
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "picobot",
        "purge",
        "user",
        ALICE.user_id,
        "--yes",
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    exited = time.monotonic()
    assert proc.returncode == 0, err.decode()
    assert "Deleted all data of user tui:alice" in out.decode()

    await gone_within(rt, words, exited)
    while model.forgotten == forgotten:  # the model's kept prompts went too
        assert time.monotonic() - exited < DEADLINE_SECS
        await asyncio.sleep(0.02)
    # So did the cached token estimates (only what was estimated since is left).
    assert len(tokens._script_estimate) < estimates

    # Alice comes back on this server: her prompt holds nothing of before, and her new
    # message is sealed under a new key, not the deleted one (which would read as
    # erased once this process restarts).
    await say(rt, ALICE, "hello again, Fennecroft here")
    prompt = "\n".join(m.content for m in model.prompts[-1])
    assert "Fennecroft" in prompt
    assert not [w for w in [*words, "Wombatine"] if w in prompt]
    [(new_kid, text), answer] = await contents(rt, ALICE.user_id)
    assert new_kid != old_kid and text == "hello again, Fennecroft here"
    assert answer == (new_kid, "You said: hello again, Fennecroft here")
    [(_, bobs), _] = await contents(rt, BOB.user_id)
    assert bobs == "bob likes Platypodium"

    # The files hold no word of hers, nor her deleted key.
    assert scan(data, [*words, "Wombatine"]) == {}
    assert not [p.name for p in data.rglob("*") if p.is_file() and wrapped in p.read_bytes()]


async def test_no_process_opens_or_seals_with_a_key_another_deleted(
    tmp_path: Path, model: KeepingModel
) -> None:
    settings = settings_for(tmp_path)
    async with open_runtime(settings, provider=model) as rt:
        await say(rt, ALICE, "before the purge")
        [(old_kid, _), *_] = await contents(rt, ALICE.user_id)
        assert old_kid in rt.db.sealer.ring.known_kids()  # type: ignore[union-attr]
        # Another process deletes alice's key (a user purge's first step) while this one
        # holds it cached, and before the purge's deletion reaches her rows.
        async with open_database(settings) as other:
            assert other.sealer.forget(ALICE.user_id)
        assert {text for _, text in await contents(rt, ALICE.user_id)} == {"[erased]"}
        await say(rt, ALICE, "after the key went")
        *_, (new_kid, text), _ = await contents(rt, ALICE.user_id)  # then the answer
        assert new_kid != old_kid and text == "after the key went"
    # Restarted, the process reads what it stored after the purge: nothing was sealed
    # under the deleted key.
    async with open_runtime(settings, provider=model) as again:
        *_, (_, text), (_, reply) = await contents(again, ALICE.user_id)
        assert (text, reply) == ("after the key went", "You said: after the key went")


async def test_records_recalled_from_a_purged_session_leave_other_sessions_epochs(
    tmp_path: Path, rt: Runtime
) -> None:
    purged = await say(rt, ALICE, "my dentist is Doctor Quokkaberg")
    await SearchIndex(rt.db).index_pending(None)  # the background indexer, now
    await say(rt, ALICE, "/new")
    asking = await say(rt, ALICE, "who is Doctor Quokkaberg")
    assert purged and asking and asking != purged
    retriever = rt.kernel.retriever
    assert isinstance(retriever, MemoryRetriever)
    # The second session's epoch keeps what it recalled from the first.
    assert "my dentist is Doctor Quokkaberg" in repr(retriever._epochs[asking])

    # Another process purges the first session; the second one stays.
    async with open_database(settings_for(tmp_path)) as other:
        controller = PrivacyController(other)
        await controller.execute(await controller.plan(SessionScope(purged), OPERATOR))
        done = time.monotonic()
    await gone_within(rt, ["Quokkaberg"], done)
    assert purged not in retriever._epochs
