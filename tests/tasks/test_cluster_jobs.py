"""Cluster-wide jobs: on one instance at a time among those sharing a store, handed over
when that one stops or dies."""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from picobot.config.settings import Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.runtime import open_database, open_runtime
from picobot.store.db import Database
from picobot.store.leases import leases, release, take
from picobot.tasks.cluster import SKIPPED, ClusterJobs
from tests.killed import kill_when_ready


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def settings_for(tmp_path: Path) -> Settings:
    return Settings(data={"dir": str(tmp_path / "data")})


@pytest.fixture
async def two(tmp_path: Path) -> AsyncIterator[tuple[Database, Database]]:
    """Two stores open on one data directory, as two instances have them."""
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(open_database(settings_for(tmp_path)))
        b = await stack.enter_async_context(open_database(settings_for(tmp_path)))
        yield a, b


async def test_a_lease_has_one_holder_until_it_expires_or_is_released(
    two: tuple[Database, Database],
) -> None:
    a, b = two
    assert await take(a, ["retention"], "a", 130.0, 100.0) == {"retention"}
    assert await take(b, ["retention"], "b", 140.0, 110.0) == set()  # a's, until 130
    assert await take(a, ["retention"], "a", 150.0, 120.0) == {"retention"}  # renewed
    assert await take(b, ["retention"], "b", 160.0, 149.0) == set()
    assert await take(b, ["retention", "learn"], "b", 181.0, 151.0) == {"retention", "learn"}
    assert await take(a, ["retention"], "a", 190.0, 160.0) == set()  # b took it over
    [learn, held] = await leases(a)
    assert (held.name, held.holder, held.expires_at) == ("retention", "b", 181.0)
    await release(b, ["retention"], "b")
    assert await take(a, ["retention"], "a", 200.0, 170.0) == {"retention"}  # at once
    assert learn.holder == "b"


async def test_a_cluster_job_runs_on_the_holder_only_and_moves_when_it_stops_renewing(
    two: tuple[Database, Database],
) -> None:
    clock = Clock()
    a = ClusterJobs(two[0], "a", lease_secs=30.0, clock=clock)
    b = ClusterJobs(two[1], "b", lease_secs=30.0, clock=clock)
    ran: list[str] = []

    def job(who: str) -> object:
        async def run() -> str:
            ran.append(who)
            return "done"

        return run

    run_a, run_b = a.once("retention", job("a")), b.once("retention", job("b"))  # type: ignore[arg-type]
    assert await run_a() == "done"
    assert await run_b() == SKIPPED
    clock.now += 25
    assert await a.keep() == 1  # renewed: still a's after another 25 s
    clock.now += 25
    assert await run_b() == SKIPPED
    assert await run_a() == "done"
    # a stops renewing (stalled, or gone): after the lease b takes the job over.
    clock.now += 31
    assert await run_b() == "done"
    assert await a.keep() == 0 and a.held == set()  # a learns it lost the lease
    assert await run_a() == SKIPPED
    assert ran == ["a", "a", "b"]


KILLED_HOLDER = textwrap.dedent(
    """
    import asyncio, sys, time
    from picobot.config.settings import Settings
    from picobot.runtime import open_database
    from picobot.store.leases import take

    async def main() -> None:
        async with open_database(Settings(data={"dir": sys.argv[1]})) as db:
            now = time.time()
            assert await take(db, ["retention"], "doomed", now + 1.5, now)
            print("held", flush=True)
            await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def test_an_instance_killed_holding_a_lease_hands_its_job_over_once_it_expires(
    tmp_path: Path,
) -> None:
    settings = settings_for(tmp_path)
    async with open_database(settings) as db:  # migrated before the holder starts
        await kill_when_ready(KILLED_HOLDER, str(settings.data_dir), ready=b"held")
        survivor = ClusterJobs(db, "survivor", lease_secs=1.5)
        runs: list[float] = []

        async def retention() -> None:
            runs.append(time.time())

        run = survivor.once("retention", retention)
        assert await run() == SKIPPED  # the dead instance's lease has not expired yet
        deadline = time.monotonic() + 5
        while await run() == SKIPPED:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        assert len(runs) == 1
        [lease] = await leases(db)
        assert lease.holder == "survivor"


async def test_two_servers_on_one_store_run_retention_once_and_hand_it_over_on_stop(
    tmp_path: Path,
) -> None:
    settings = settings_for(tmp_path)
    async with AsyncExitStack() as first_stack, AsyncExitStack() as second_stack:
        first = await first_stack.enter_async_context(
            open_runtime(settings, provider=ScriptedProvider())
        )
        second = await second_stack.enter_async_context(
            open_runtime(settings, provider=ScriptedProvider())
        )
        runs = [await rt.tasks.job("retention").wait_runs(1) for rt in (first, second)]
        # Both ran the job at start; exactly one did the work.
        assert sorted(r.last_result == SKIPPED for r in runs) == [False, True]
        holder, other = (first, second) if runs[1].last_result == SKIPPED else (second, first)
        # A clean stop gives the leases up: the other server's next run does the work,
        # without waiting for the lease to expire.
        await (first_stack if holder is first else second_stack).aclose()
        job = other.tasks.job("retention")
        job.wake()
        status = await job.wait_runs(2)
        assert status.last_result != SKIPPED
