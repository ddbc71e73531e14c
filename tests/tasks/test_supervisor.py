"""TaskSupervisor: owned tasks are cancelled and awaited; failures are logged and recorded."""

from __future__ import annotations

import asyncio
import logging

import pytest

from picobot.tasks.supervisor import TaskSupervisor

HOUR = 3600.0


async def test_exit_cancels_and_awaits_every_task() -> None:
    started = {"oneoff": asyncio.Event(), "periodic": asyncio.Event()}
    cleaned: list[str] = []

    async def forever(name: str) -> None:
        try:
            started[name].set()
            await asyncio.Event().wait()
        finally:
            # Runs only if the supervisor awaits the cancelled task before returning.
            await asyncio.sleep(0)
            cleaned.append(name)

    async def job() -> None:
        await forever("periodic")

    async with TaskSupervisor() as sup:
        oneoff = sup.spawn("oneoff", forever("oneoff"))
        sup.every("job", HOUR, job, run_at_start=True)
        await started["oneoff"].wait()
        await started["periodic"].wait()
        assert sup.status()["job"].running
        periodic = next(t for t in asyncio.all_tasks() if t.get_name() == "every:job")
    assert oneoff.cancelled()
    assert periodic.done()
    assert sorted(cleaned) == ["oneoff", "periodic"]
    assert sup.pending == 0


async def test_exit_on_error_still_cancels_tasks() -> None:
    sup = TaskSupervisor()
    with pytest.raises(ValueError, match="body failed"):
        async with sup:
            task = sup.spawn("waiter", asyncio.Event().wait())
            raise ValueError("body failed")
    assert task.cancelled()


async def test_failing_periodic_job_keeps_running_and_status_shows_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("database is on fire")
        return f"ok run {calls}"

    async with TaskSupervisor() as sup:
        job = sup.every("flaky", HOUR, flaky, run_at_start=True)
        first = await job.wait_runs(1)
        assert first.runs == 1 and first.failures == 1
        assert first.last_ok is False
        assert first.last_error == "RuntimeError: database is on fire"
        assert first.last_started_at is not None and first.last_finished_at is not None
        assert sup.status()["flaky"] == first
        assert "periodic job flaky failed" in caplog.text
        assert any(r.exc_info for r in caplog.records)

        job.wake()  # the loop survived the failure and runs again on request
        second = await job.wait_runs(2)
        assert second.runs == 2 and second.failures == 1 and second.consecutive_failures == 0
        assert second.last_ok is True
        assert second.last_result == "ok run 2"
        # The earlier failure stays visible after a success.
        assert second.last_error == "RuntimeError: database is on fire"


async def test_periodic_job_waits_for_its_interval_unless_woken() -> None:
    ran = asyncio.Event()

    async def job() -> None:
        ran.set()

    async with TaskSupervisor() as sup:
        handle = sup.every("lazy", HOUR, job)
        for _ in range(20):  # give the loop every chance to run it early
            await asyncio.sleep(0)
        assert not ran.is_set()
        assert handle.status.runs == 0
        handle.wake()
        status = await handle.wait_runs(1)
        assert ran.is_set() and status.last_ok is True and status.last_result is None


async def test_spawn_logs_exceptions_and_forgets_finished_tasks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def boom() -> None:
        raise KeyError("missing thing")

    async def fine() -> int:
        return 1

    caplog.set_level(logging.ERROR)
    async with TaskSupervisor() as sup:
        sup.spawn("boom-task", boom())
        sup.spawn("fine-task", fine())
        assert sup.pending == 2
        await sup.join()
        assert sup.pending == 0
        assert sup.spawn_failures == 1
    records = [r for r in caplog.records if "boom-task" in r.getMessage()]
    assert len(records) == 1
    assert records[0].exc_info is not None and records[0].exc_info[0] is KeyError


async def test_spawn_outside_the_block_is_refused_without_leaking_the_coroutine() -> None:
    sup = TaskSupervisor()

    async def work() -> None:
        return None

    with pytest.raises(RuntimeError, match="not running"):
        sup.spawn("early", work())  # closed, so no "never awaited" warning
    async with sup:
        pass
    with pytest.raises(RuntimeError, match="not running"):
        sup.spawn("late", work())
    with pytest.raises(RuntimeError, match="not running"):
        sup.every("late", HOUR, work)


async def test_duplicate_periodic_job_names_are_rejected() -> None:
    async def work() -> None:
        return None

    async with TaskSupervisor() as sup:
        sup.every("same", HOUR, work)
        with pytest.raises(ValueError, match="already exists"):
            sup.every("same", HOUR, work)
