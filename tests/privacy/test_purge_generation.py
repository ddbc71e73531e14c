"""The purge generation: every deletion of user data moves it once committed (purges of
every scope, also one that failed part way, retention sweeps and storage caps that
deleted something), every process sharing the store reads the same value, and the watch
runs each process's drops when it moved."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import picobot.privacy.controller as controller_module
from picobot.config.settings import Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound
from picobot.privacy.controller import PrivacyController
from picobot.privacy.scopes import Actor, OlderThanScope, PurgeScope, SessionScope, UserScope
from picobot.runtime import Runtime, open_database, open_runtime
from picobot.store.db import Database
from picobot.store.purge_generation import advance, current
from picobot.tasks.purge_watch import PurgeWatch
from picobot.tasks.retention import RetentionTask

ALICE = Identity("tui", "tui:alice", "local")
OPERATOR = Actor("operator:cli", operator=True)
DAY = 86_400.0


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    settings = Settings(data={"dir": str(tmp_path / "data")})
    async with open_runtime(settings, provider=ScriptedProvider()) as runtime:
        yield runtime


async def say(rt: Runtime, text: str) -> str | None:
    events = [e async for e in rt.kernel.handle(Inbound(ALICE, text))]
    return events[-1].session_id


async def test_every_process_sharing_the_store_reads_the_same_counter(tmp_path: Path) -> None:
    settings = Settings(data={"dir": str(tmp_path / "data")})
    async with open_database(settings) as one, open_database(settings) as other:
        assert await current(one) == 0  # nothing was ever purged
        assert await advance(other) == 1
        assert await current(one) == 1
        assert await advance(one) == 2
        assert await current(other) == 2


@pytest.mark.parametrize("kind", ["session", "user", "older"])
async def test_a_purge_of_any_scope_moves_it_once_it_deleted(rt: Runtime, kind: str) -> None:
    sid = await say(rt, "hello")
    assert sid
    scopes: dict[str, PurgeScope] = {
        "session": SessionScope(sid),
        "user": UserScope(ALICE.user_id),
        "older": OlderThanScope(1),
    }
    controller = PrivacyController(rt.db, clock=lambda: time.time() + 2 * DAY)
    plan = await controller.plan(scopes[kind], OPERATOR)
    assert plan.counts.messages == 2
    before = await current(rt.db)
    await controller.execute(plan)
    assert await current(rt.db) == before + 1


async def test_a_purge_that_failed_part_way_moves_it_too(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = await say(rt, "hello")
    assert sid

    async def broken(*_args: object, **_kw: object) -> None:
        raise RuntimeError("the events could not be pruned")

    # The rows are deleted, then the purge fails: other processes must still look.
    monkeypatch.setattr(controller_module, "finish_purge", broken)
    controller = PrivacyController(rt.db)
    before = await current(rt.db)
    with pytest.raises(RuntimeError, match="could not be pruned"):
        await controller.execute(await controller.plan(SessionScope(sid), OPERATOR))
    assert await current(rt.db) == before + 1


async def test_retention_moves_it_only_when_it_deleted_something(rt: Runtime) -> None:
    await say(rt, "hello")
    later = time.time() + 10 * DAY
    retention = RetentionTask(rt.db, max_age_days=1, clock=lambda: later)
    before = await current(rt.db)
    assert (await retention.run()).counts.total > 0
    assert await current(rt.db) == before + 1
    assert (await retention.run()).counts.total == 0
    assert await current(rt.db) == before + 1


async def test_a_storage_cap_that_deleted_a_session_moves_it(tmp_path: Path) -> None:
    settings = Settings(
        data={"dir": str(tmp_path / "data")},
        session={"retention": {"max_sessions_per_user": 1}},
    )
    async with open_runtime(settings, provider=ScriptedProvider()) as rt:
        first = await say(rt, "hello")
        before = await current(rt.db)
        await say(rt, "/new")
        await say(rt, "hello again")  # the cap deletes the first session
        assert await rt.db.fetchone("SELECT 1 FROM sessions WHERE id = ?", (first,)) is None
        assert await current(rt.db) == before + 1


async def test_the_watch_runs_every_drop_once_per_move(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(data={"dir": str(tmp_path / "data")})
    calls: list[str] = []

    def failing() -> None:
        calls.append("failing")
        raise RuntimeError("boom")

    async def later() -> None:
        calls.append("async")

    async with open_database(settings) as db, open_database(settings) as other:
        await advance(other)  # before this process started: nothing of it is kept here
        watch = PurgeWatch(db, [failing, lambda: calls.append("plain"), later])
        assert not await watch.check()
        assert not await watch.check()
        assert calls == []
        await advance(other)  # another process deleted something
        with caplog.at_level(logging.ERROR):
            assert await watch.check()
        # A failing drop is logged and the others still run.
        assert calls == ["failing", "plain", "async"]
        assert "dropping what a purge deleted failed" in caplog.text
        assert not await watch.check()
        assert calls == ["failing", "plain", "async"]


async def test_a_database_without_a_purge_yet_reads_zero(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "plain.db")
    try:
        assert await current(db) == 0
    finally:
        await db.close()
