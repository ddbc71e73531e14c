"""A purge that fails or is cut short before its erasure: retention erases what it left.

The purge records itself (``task_runs`` row ``purge-erase``) before it deletes anything
and again once its residue is erased. These tests leave real residue on disk (the
deleted text still in the index segments, the WAL or free space) and scan the files
for it, as tests/privacy/test_erasure.py does.
"""

from __future__ import annotations

import random

import pytest

import picobot.privacy.controller as controller_module
from picobot.cli.status import StoreStatus, format_status
from picobot.errors import StoreUnavailable
from picobot.privacy.controller import PrivacyController
from picobot.privacy.scopes import Actor, UserScope
from picobot.store.db import Database
from picobot.store.erasure.purge import PurgeStore
from picobot.store.retrieval.search import SearchIndex
from picobot.store.task_runs import (
    PURGE_ERASE_TASK_NAME,
    ErasureState,
    TaskRun,
    erasure_state,
    last_run,
    record_start,
)
from picobot.tasks.retention import RetentionTask
from tests.privacy.test_erasure import new_marker, scan
from tests.privacy.test_purge_store import ALICE, BOB, T0, add_message, add_session, integrity_ok
from tests.privacy.test_retention import Clock

OPERATOR = Actor("operator:test", operator=True)
DAYS_90 = 90.0


async def alice_and_bob(db: Database) -> tuple[list[str], list[str]]:
    """Both chat, their words indexed; returns (Alice's markers, Bob's markers)."""
    rng = random.Random(11)
    markers: dict[str, list[str]] = {ALICE: [], BOB: []}
    for user, sid in ((ALICE, "s-alice"), (BOB, "s-bob")):
        await add_session(db, user, sid)
        for _ in range(5):
            marker = new_marker(rng)
            markers[user].append(marker)
            await add_message(db, sid, f"remember {marker} please", at=T0 + 10)
    await SearchIndex(db).index_pending()
    return markers[ALICE], markers[BOB]


async def settled_retention(db: Database, clock: Clock) -> RetentionTask:
    """A retention task that has run twice, the second time finding nothing to erase."""
    task = RetentionTask(db, max_age_days=DAYS_90, clock=clock, erase_interval_secs=86_400)
    await task.run()
    clock.now += 60
    assert not (await task.run()).erased
    return task


async def purge_row(db: Database) -> TaskRun | None:
    return await last_run(db, PURGE_ERASE_TASK_NAME)


@pytest.mark.sqlite_only
async def test_a_purge_whose_erasure_fails_is_erased_by_the_next_retention_run(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice, bob = await alice_and_bob(db)
    clock = Clock(T0 + 100)
    task = await settled_retention(db, clock)
    data_dir = db.path.parent
    assert set(scan(data_dir, alice)) == set(alice)

    async def disk_full(_db: Database, **_kw: object) -> None:
        raise StoreUnavailable("database or disk is full")

    monkeypatch.setattr(controller_module, "erase_residue", disk_full)
    controller = PrivacyController(db, clock=clock)
    plan = await controller.plan(UserScope(ALICE), OPERATOR)
    started = clock.now
    with pytest.raises(StoreUnavailable):
        await controller.execute(plan)
    monkeypatch.undo()

    # The rows are gone, their bytes are not, and the failure is on record.
    assert (await PurgeStore(db).count_user(ALICE)).total == 0
    assert scan(data_dir, alice)
    row = await purge_row(db)
    assert row is not None and row.ok is False and "disk is full" in (row.error or "")
    assert (await erasure_state(db, 86_400)).purge_residue_since == started

    # The same task's next run would have had nothing to erase (see settled_retention).
    clock.now += 60
    report = await task.run()
    assert report.erased
    assert scan(data_dir, alice) == {}
    assert set(scan(data_dir, bob)) == set(bob)
    row = await purge_row(db)
    assert row is not None and row.ok and not row.unfinished
    assert (await erasure_state(db, 86_400)).purge_residue_since is None
    await integrity_ok(db)


@pytest.mark.sqlite_only
async def test_a_purge_cut_short_by_a_crash_is_erased_at_the_next_start(db: Database) -> None:
    alice, bob = await alice_and_bob(db)
    clock = Clock(T0 + 100)
    running = await settled_retention(db, clock)
    # A purge that deleted Alice's rows and died before its erasure.
    await record_start(db, PURGE_ERASE_TASK_NAME, clock.now)
    await PurgeStore(db).delete_user(ALICE)
    assert scan(db.path.parent, alice)
    assert (await erasure_state(db, 86_400)).purge_residue_since == clock.now

    # A task that already ran in this process may be looking at a purge under way.
    clock.now += 60
    assert not (await running.run()).erased
    assert scan(db.path.parent, alice)

    # A restarted process's first run knows no purge of its own has started.
    restarted = RetentionTask(db, max_age_days=DAYS_90, clock=clock, erase_interval_secs=86_400)
    clock.now += 60
    assert (await restarted.run()).erased
    assert scan(db.path.parent, alice) == {}
    assert set(scan(db.path.parent, bob)) == set(bob)
    row = await purge_row(db)
    assert row is not None and row.ok and row.result == "erased by retention"


async def test_a_purge_that_erased_leaves_nothing_for_retention(db: Database) -> None:
    alice, _bob = await alice_and_bob(db)
    clock = Clock(T0 + 100)
    await settled_retention(db, clock)
    controller = PrivacyController(db, clock=clock)
    started = clock.now
    await controller.execute(await controller.plan(UserScope(ALICE), OPERATOR))
    assert scan(db.path.parent, alice) == {}
    row = await purge_row(db)
    assert row is not None and row.ok and row.last_started_at == started
    assert (await erasure_state(db, 86_400)).purge_residue_since is None
    # Even a first run (a new process) finds nothing left to erase.
    fresh = RetentionTask(db, max_age_days=DAYS_90, clock=clock, erase_interval_secs=86_400)
    clock.now += 60
    assert not (await fresh.run()).erased


@pytest.mark.parametrize("ran", [True, False])
def test_status_warns_of_a_purge_that_left_residue(ran: bool) -> None:
    # Also when retention never ran: a purge that failed first is then the only warning
    # of residue (before, status stopped at "never run" and said nothing of it).
    ok = TaskRun("retention", T0, T0 + 1, True, "deleted nothing", None) if ran else None
    erasure = ErasureState(T0, None, None, purge_residue_since=T0 - 3600)
    lines = format_status(StoreStatus(3, 3, 1, 2, 3, ok, erasure), 3600, T0 + 60)
    assert any(
        line.startswith("warning: a purge started") and "the next retention run erases it" in line
        for line in lines
    )
    clean = format_status(StoreStatus(3, 3, 1, 2, 3, ok, ErasureState(T0, None, None)), 3600, T0)
    assert not any("a purge started" in line for line in clean)
