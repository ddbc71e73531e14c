"""RetentionTask: the age rules, dry runs, batching, durable run records, erasure, CLI."""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from picobot.cli.ops import add_ops_commands
from picobot.cli.status import format_status, human_bytes, human_duration
from picobot.store.connection import AsyncConnection
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.summaries import SummaryRepo
from picobot.store.db import Database
from picobot.store.erasure.erase import erase_residue
from picobot.store.erasure.purge import PurgeCounts, PurgeStore
from picobot.store.migrations import MIGRATIONS
from picobot.store.retrieval.search import SearchIndex
from picobot.store.task_runs import (
    ERASE_TASK_NAME,
    TASK_NAME,
    ErasureState,
    erasure_state,
    last_run,
    record_run,
)
from picobot.tasks import retention as retention_module
from picobot.tasks.retention import RetentionReport, RetentionTask
from picobot.tasks.supervisor import TaskSupervisor
from tests.privacy.test_erasure import new_marker, scan, wal_size
from tests.privacy.test_purge_store import (
    ALICE,
    BOB,
    DAY,
    T0,
    add_memory,
    add_message,
    add_session,
    add_summary,
    add_tool,
    integrity_ok,
    table_counts,
)


class Clock:
    """A settable clock; every call returns ``now``."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def erasures(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The clock's time at each residue erasure retention runs (the real one still runs)."""
    at: list[float] = []

    async def spy(database: Database, *, vacuum: bool = True) -> None:
        at.append(clock.now)
        await erase_residue(database, vacuum=vacuum)

    monkeypatch.setattr(retention_module, "erase_residue", spy)
    return at


def task(db: Database, clock: Clock, batch_size: int = 500) -> RetentionTask:
    return RetentionTask(db, max_age_days=90, batch_size=batch_size, clock=clock)


def ago(days: float) -> float:
    return T0 - days * DAY


async def contents(db: Database, sid: str) -> list[str]:
    return [m.content for m in await MessageRepo(db).last(sid, 100)]


# --- the rules --------------------------------------------------------------------------


async def test_91_days_old_goes_89_days_old_stays(db: Database, clock: Clock) -> None:
    await add_session(db, ALICE, "s", at=ago(95))
    await add_message(db, "s", "ninety-one days old", at=ago(91))
    await add_message(db, "s", "exactly ninety days old", at=ago(90))
    await add_message(db, "s", "eighty-nine days old", at=ago(89))
    report = await task(db, clock).run()
    assert report.cutoff == ago(90)
    assert report.counts == PurgeCounts(messages=1, index_entries=1)
    # "Older than 90 days" is strict: the message born at the cutoff stays.
    assert await contents(db, "s") == ["exactly ninety days old", "eighty-nine days old"]
    assert await SearchIndex(db).search(ALICE, ["ninety"]) != []
    assert await SearchIndex(db).search(ALICE, ["one"]) == []

    clock.now += 2 * DAY  # two days later the 89-day-old message is 91 days old
    await task(db, clock).run()
    assert await contents(db, "s") == []


async def test_memories_are_never_deleted(db: Database, clock: Clock) -> None:
    await add_memory(db, ALICE, "birthday", "march third", at=ago(400))
    await add_session(db, ALICE, "s", at=ago(400))
    await add_message(db, "s", "very old", at=ago(400))
    report = await task(db, clock).run()
    assert report.counts.memories == 0 and report.counts.messages == 1
    assert [m.key for m in await MemoryRepo(db).list(ALICE)] == ["birthday"]
    assert len(await SearchIndex(db).search(ALICE, ["march"])) == 1


async def test_a_summary_goes_only_when_all_it_covers_has_expired(
    db: Database, clock: Clock
) -> None:
    await add_session(db, ALICE, "all-old", at=ago(100))
    for _ in range(2):
        await add_message(db, "all-old", "old", at=ago(100))
    await add_message(db, "all-old", "recent", at=ago(1))
    await add_summary(db, "all-old", "covers two old messages", 2)
    await add_session(db, ALICE, "part-old", at=ago(100))
    await add_message(db, "part-old", "old", at=ago(100))
    await add_message(db, "part-old", "recent", at=ago(1))
    await add_summary(db, "part-old", "covers an old and a recent message", 2)

    report = await task(db, clock).run()
    assert report.counts.summaries == 1 and report.counts.messages == 3
    assert await SummaryRepo(db).get("all-old") is None
    kept = await SummaryRepo(db).get("part-old")
    assert kept is not None and kept.covered_seq == 2
    # With its summary gone, the remaining history of the session counts as unsummarized.
    assert await SummaryRepo(db).unsummarized_tokens("all-old") == 5


async def test_empty_old_sessions_go_and_sessions_with_messages_stay(
    db: Database, clock: Clock
) -> None:
    await add_session(db, ALICE, "expired", at=ago(120))
    await add_message(db, "expired", "old", at=ago(120))
    await add_tool(db, "expired", ALICE, "old tool", at=ago(120))
    await add_session(db, ALICE, "never-used", at=ago(120))
    await add_session(db, ALICE, "revived", at=ago(120))
    await add_message(db, "revived", "old", at=ago(120))
    await add_message(db, "revived", "new", at=ago(3))
    await add_session(db, BOB, "new-and-empty", at=ago(1))

    report = await task(db, clock).run()
    assert report.counts == PurgeCounts(
        sessions=2, messages=2, summaries=0, memories=0, index_entries=2, tool_records=1
    )
    rows = await db.fetchall("SELECT id FROM sessions ORDER BY id")
    assert [r[0] for r in rows] == ["new-and-empty", "revived"]
    current = await db.fetchall("SELECT session_id FROM current_sessions ORDER BY session_id")
    assert [r[0] for r in current] == ["new-and-empty", "revived"]
    assert await contents(db, "revived") == ["new"]
    await integrity_ok(db)


async def test_dry_run_deletes_nothing_and_reports_the_same_counts(
    db: Database, clock: Clock
) -> None:
    await add_session(db, ALICE, "old", at=ago(100))
    for i in range(4):
        await add_message(db, "old", f"old {i}", at=ago(100))
    await add_summary(db, "old", "old summary", 2, at=ago(100))
    await add_tool(db, "old", ALICE, "old tool", at=ago(100))
    await add_session(db, BOB, "mixed", at=ago(100))
    await add_message(db, "mixed", "old", at=ago(100))
    await add_message(db, "mixed", "new", at=ago(1))
    before = await table_counts(db)

    dry = await task(db, clock).run(dry_run=True)
    assert dry.dry_run and str(dry).startswith("would delete 1 session, 5 messages, 1 summary")
    assert await table_counts(db) == before
    assert await last_run(db, TASK_NAME) is None  # a dry run is not a retention run

    real = await task(db, clock).run()
    assert not real.dry_run and real.counts == dry.counts
    after = await table_counts(db)
    assert before["messages"] - after["messages"] == real.counts.messages == 5
    assert before["index_entries"] - after["index_entries"] == real.counts.index_entries


async def test_large_sweeps_are_batched(
    db: Database, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await add_session(db, ALICE, "big", at=ago(100))
    async with db.transaction() as conn:
        await conn.executemany(
            "INSERT INTO messages (session_id, seq_order, role, content, token_estimate,"
            " created_at) VALUES ('big', ?, 'user', 'old words', 1, ?)",
            [(i, ago(100)) for i in range(1, 51)],
        )
    await add_message(db, "big", "keeps the session", at=ago(1))
    transactions = 0
    real = db.transaction

    @asynccontextmanager
    async def counted() -> AsyncIterator[AsyncConnection]:
        nonlocal transactions
        transactions += 1
        async with real() as conn:
            yield conn

    monkeypatch.setattr(db, "transaction", counted)
    report = await PurgeStore(db).delete_older(ago(90), batch_size=7)
    assert report.messages == 50 and report.index_entries == 50
    assert await contents(db, "big") == ["keeps the session"]
    # ceil(50 / 7) = 8 batches of messages (+1 empty probe per table swept).
    assert transactions >= 8 + 1


# --- run records and failures -----------------------------------------------------------


async def test_runs_are_recorded_durably(
    db: Database, clock: Clock, reopen: Callable[[Database], AbstractAsyncContextManager[Database]]
) -> None:
    await add_session(db, ALICE, "s", at=ago(100))
    await add_message(db, "s", "old", at=ago(100))
    report = await task(db, clock).run()
    run = await last_run(db, TASK_NAME)
    assert run is not None and run.ok is True and run.error is None
    assert run.last_started_at == T0 and run.last_finished_at == T0
    assert run.result == str(report) and "1 message" in run.result
    assert not run.unfinished

    await db.close()  # a restart keeps it
    async with reopen(db) as again:
        assert await last_run(again, TASK_NAME) == run


async def test_a_failure_is_logged_recorded_and_raised(
    db: Database,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await add_session(db, ALICE, "s", at=ago(100))
    await add_message(db, "s", "secret old words", at=ago(100))
    await task(db, clock).run()

    async def broken(self: PurgeStore, cutoff_ts: float, *, batch_size: int) -> PurgeCounts:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(PurgeStore, "delete_older", broken)
    clock.now += 3600
    with caplog.at_level(logging.INFO), pytest.raises(RuntimeError, match="disk on fire"):
        await task(db, clock).run()
    run = await last_run(db, TASK_NAME)
    assert run is not None and run.ok is False and run.result is None
    assert run.error == "RuntimeError: disk on fire"
    assert run.last_started_at == T0 + 3600
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert failures and failures[0].exc_info is not None
    assert "secret" not in caplog.text  # counts and errors only, never content


async def test_a_closed_database_fails_loudly(db: Database, clock: Clock) -> None:
    job = task(db, clock)
    await db.close()
    with pytest.raises(Exception):  # noqa: B017 - whatever the driver raises, it must surface
        await job.run()


async def test_the_supervisor_sees_results_and_failures(
    db: Database, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await add_session(db, ALICE, "s", at=ago(100))
    await add_message(db, "s", "old", at=ago(100))
    job_task = task(db, clock)
    async with TaskSupervisor() as tasks:
        job = tasks.every("retention", 3600, job_task.run, run_at_start=True)
        status = await job.wait_runs(1)
        assert status.last_ok is True and status.last_result is not None
        assert status.last_result.startswith("deleted 1 session, 1 message")

        async def broken(self: PurgeStore, cutoff_ts: float, *, batch_size: int) -> PurgeCounts:
            raise RuntimeError("disk on fire")

        monkeypatch.setattr(PurgeStore, "delete_older", broken)
        job.wake()
        status = await job.wait_runs(2)
        assert status.last_ok is False and status.last_error == "RuntimeError: disk on fire"


async def test_erase_runs_when_needed_and_is_skipped_otherwise(
    db: Database, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    erased: list[bool] = []

    async def spy(database: Database, *, vacuum: bool = True) -> None:
        erased.append(vacuum)
        await erase_residue(database, vacuum=vacuum)

    monkeypatch.setattr(retention_module, "erase_residue", spy)
    await task(db, clock).run()  # first run ever: erases what older versions left
    await task(db, clock).run()  # nothing deleted, nothing pending: no rewrite
    assert erased == [True]
    await add_session(db, ALICE, "s", at=ago(100))
    await add_message(db, "s", "old", at=ago(100))
    await task(db, clock).run()
    assert erased == [True, True]
    await record_run(db, TASK_NAME, started_at=T0, finished_at=T0, ok=False, error="x")
    await task(db, clock).run()  # the failed run may have left residue behind
    assert len(erased) == 3


async def test_the_erasure_waits_for_its_interval_and_then_runs(
    db: Database, clock: Clock, erasures: list[float]
) -> None:
    hour = 3600.0

    async def run(at: float) -> RetentionReport:
        clock.now = at
        sweep = RetentionTask(db, max_age_days=90, clock=clock, erase_interval_secs=24 * hour)
        return await sweep.run()

    assert (await run(T0)).erased  # the first run ever erases
    await add_session(db, ALICE, "s", at=ago(100))
    await add_message(db, "s", "expired pelican", at=ago(100))
    first = await run(T0 + hour)
    assert first.counts.messages == 1 and not first.erased
    assert first.erase_due == T0 + 24 * hour
    assert "residue to be erased from" in str(first)
    # The rows are gone from every query at once; only the rewrite waits.
    assert await SearchIndex(db).search(ALICE, ["pelican"]) == []
    assert (await erasure_state(db, 24 * hour)).waiting_since == T0 + hour
    await add_session(db, BOB, "t", at=ago(100))
    await add_message(db, "t", "expired too", at=ago(100))
    second = await run(T0 + 2 * hour)
    assert second.counts.messages == 1 and second.erase_due == T0 + 24 * hour
    state = await erasure_state(db, 24 * hour)
    assert state.waiting_since == T0 + hour  # the oldest residue sets the deadline
    assert erasures == [T0]
    # Nothing new expires, but residue has waited the interval: this run erases it.
    due = await run(T0 + 24 * hour)
    assert due.counts.total == 0 and due.erased and erasures == [T0, T0 + 24 * hour]
    assert await erasure_state(db, 24 * hour) == ErasureState(T0 + 24 * hour, None, None)
    assert not (await run(T0 + 25 * hour)).erased  # nothing waits: no rewrite
    # A run that failed may have deleted rows without recording residue: erase anyway.
    await record_run(db, TASK_NAME, started_at=clock.now, finished_at=clock.now, ok=False)
    assert (await run(T0 + 26 * hour)).erased
    with pytest.raises(ValueError, match="erase_interval_secs"):
        RetentionTask(db, max_age_days=90, erase_interval_secs=-1)


async def test_an_erasure_recorded_in_the_future_does_not_defer_the_next(
    db: Database, clock: Clock, erasures: list[float]
) -> None:
    # The clock ran 30 days ahead when the last erasure was recorded, then was put right.
    interval = DAY
    clock.now = T0 + 30 * DAY
    await RetentionTask(db, max_age_days=90, clock=clock, erase_interval_secs=interval).run()
    clock.now = T0
    await add_session(db, ALICE, "s", at=ago(100))
    await add_message(db, "s", "expired heron", at=ago(100))

    report = await RetentionTask(
        db, max_age_days=90, clock=clock, erase_interval_secs=interval
    ).run()

    assert report.counts.messages == 1
    assert report.erased and erasures == [T0 + 30 * DAY, T0]
    assert (await erasure_state(db, interval)).waiting_since is None


@pytest.mark.parametrize("interval", [86_400, 0])
async def test_the_server_erases_on_its_configured_interval(tmp_path: Path, interval: int) -> None:
    from picobot.config.settings import Settings
    from picobot.llm.scripted import ScriptedProvider
    from picobot.runtime import open_runtime

    data = tmp_path / "data"
    now = time.time()
    db = await Database.open(data / "conversations.db")
    try:
        for name in (TASK_NAME, ERASE_TASK_NAME):  # a clean run and erasure a minute ago
            await record_run(db, name, started_at=now - 60, finished_at=now - 60, ok=True)
        await add_session(db, ALICE, "s", at=now - 100 * DAY)
        await add_message(db, "s", "expired", at=now - 100 * DAY)
    finally:
        await db.close()
    retention = {"erase_interval_secs": interval} if interval != 86_400 else {}
    cfg = Settings(data={"dir": str(data)}, session={"retention": retention})
    async with open_runtime(cfg, provider=ScriptedProvider()) as rt:
        await rt.tasks.job(TASK_NAME).wait_runs(1)  # the run at start-up
        state = await erasure_state(rt.db, interval)
    if interval:
        assert state.waiting_since is not None and state.due == pytest.approx(now - 60 + interval)
    else:
        assert state.waiting_since is None and state.last_erased_at is not None
        assert state.last_erased_at > now


@pytest.mark.sqlite_only
async def test_expired_text_is_erased_from_every_file(db: Database, clock: Clock) -> None:
    import random

    rng = random.Random(99)
    old = [new_marker(rng) for _ in range(20)]
    new = [new_marker(rng) for _ in range(20)]
    await add_session(db, ALICE, "a", at=ago(200))
    await add_session(db, BOB, "b", at=ago(200))
    for i, (o, n) in enumerate(zip(old, new, strict=True)):
        sid = "a" if i % 2 else "b"
        await add_message(db, sid, f"old {o}", at=ago(100))
        await add_message(db, sid, f"new {n}", at=ago(10))
    await add_tool(db, "a", ALICE, old[0] + " " + old[1], at=ago(100))
    await add_memory(db, ALICE, new[0], "memories stay", at=ago(300))
    assert set(scan(db.path.parent, old)) == set(old)

    await task(db, clock, batch_size=3).run()
    # The scan covers the WAL too, which holds only the erase and run records written
    # after the erase (task_runs pages).
    assert scan(db.path.parent, old) == {}
    assert set(scan(db.path.parent, new)) == set(new)
    assert wal_size(db) <= 32 + 3 * (24 + 4096)
    await integrity_ok(db)


# --- command line -----------------------------------------------------------------------


def ops_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="picobot")
    parser.add_argument("--config")
    add_ops_commands(parser.add_subparsers(dest="command"))
    return parser


def run_cli(*argv: str) -> int:
    args = ops_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PICOBOT_DATA__DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def seed_old_data(data_dir: Path, sid: str = "s") -> None:
    async def seed() -> None:
        db = await Database.open(data_dir / "conversations.db")
        try:
            now = time.time()
            await add_session(db, ALICE, sid, at=now - 100 * DAY)
            await add_message(db, sid, "old", at=now - 100 * DAY)
            await add_message(db, sid, "new", at=now - DAY)
            await add_memory(db, ALICE, "food", "pizza")
        finally:
            await db.close()

    asyncio.run(seed())


def test_cli_retention_run_and_dry_run(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seed_old_data(data_dir)
    assert run_cli("retention", "run", "--dry-run") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("retention (dry run, nothing deleted): cutoff ")
    assert out[0].endswith("(90 days ago)")
    assert out[1] == "  would delete: 1 message, 1 index entry"
    assert out[2].startswith("  took ")
    assert run_cli("retention", "run") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "  deleted: 1 message, 1 index entry"
    assert out[2].endswith(", residue erased")
    assert run_cli("retention", "run") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "  deleted: nothing" and not out[2].endswith("erased")
    # A manual run erases what it deleted at once, however recent the last erasure.
    seed_old_data(data_dir, "s2")
    assert run_cli("retention", "run") == 0
    assert capsys.readouterr().out.splitlines()[2].endswith(", residue erased")


def test_cli_never_creates_a_database(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("retention", "run") == 0
    assert "nothing to delete" in capsys.readouterr().out
    assert run_cli("status") == 0
    assert "(not created yet)" in capsys.readouterr().out
    assert not data_dir.exists()


def test_cli_status_reports_contents_and_last_run(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_old_data(data_dir)
    assert run_cli("status") == 4  # needs attention: retention never ran
    out, err = capsys.readouterr()
    assert f"database: {data_dir / 'conversations.db'}" in out
    n = len(MIGRATIONS)
    assert f"schema version: {n} of {n}" in out and "sessions: 1" in out
    assert "messages: 2" in out and "memories: 1" in out
    # No server has run: its indexer has not taken the new messages yet.
    assert "recall index: 2 new messages not indexed yet" in out
    assert "retention: never run" in out
    assert err == (
        "picobot: warning: retention has never run; start the server or run `retention run`\n"
    )

    assert run_cli("retention", "run") == 0
    capsys.readouterr()
    assert run_cli("status") == 0
    out, err = capsys.readouterr()
    assert "messages: 1" in out and "(WAL 0 B)" in out
    assert (
        "retention: last run " in out and ", ok, deleted 1 message, 1 index entry older than" in out
    )
    assert "warning" not in out and err == ""


def test_status_warns_about_stale_failed_and_unfinished_runs() -> None:
    from picobot.cli.status import StoreStatus
    from picobot.store.task_runs import TaskRun

    def lines(run: TaskRun, now: float) -> list[str]:
        status = StoreStatus(3, 3, 1, 2, 3, run)
        return format_status(status, 3600, now)[4:]

    ok = TaskRun(TASK_NAME, T0, T0 + 5, True, "deleted ...", None)
    assert lines(ok, T0 + 7000)[1:] == []
    stale = lines(ok, T0 + 8000)
    assert stale[-1].startswith("warning: retention last ran 2.22h ago, more than twice")
    failed = TaskRun(TASK_NAME, T0, T0 + 5, False, None, "RuntimeError: disk on fire")
    out = lines(failed, T0 + 10)
    assert out[0].endswith("FAILED, RuntimeError: disk on fire")
    assert out[1].startswith("warning: the last retention run failed")
    waiting = StoreStatus(3, 3, 1, 2, 3, ok, ErasureState(T0, T0 + 60, T0 + 86_400))
    assert format_status(waiting, 3600, T0 + 120)[5:] == [
        "retention: rows deleted since 2023-11-14 22:14:20Z leave residue until the first"
        " run from 2023-11-15 22:13:20Z erases it"
    ]
    killed = TaskRun(TASK_NAME, T0 + 100, T0 + 5, True, "deleted ...", None)
    assert "has not finished" in lines(killed, T0 + 200)[1]
    assert lines(killed, T0 + 100 + 7300)[-1].startswith("warning: retention last ran")


def test_human_units() -> None:
    assert human_bytes(0) == "0 B" and human_bytes(1536) == "1.5 KiB"
    assert human_bytes(5 * 1024**3) == "5.0 GiB"
    assert human_duration(42) == "42s" and human_duration(5400) == "1.5h"
    assert human_duration(2 * 86_400) == "2d"
