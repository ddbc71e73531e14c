"""Summarization that fails: nothing changes, the session is retried after a backoff,
and sessions that keep failing cannot starve the others."""

from __future__ import annotations

import pytest

from picobot.llm.scripted import ScriptedProvider, ScriptedTurn
from picobot.store.db import Database
from picobot.tasks.summarize import SummarizationFailed
from picobot.tasks.supervisor import TaskSupervisor

from .test_summarize import HOUR, add_messages, all_messages, make, new_session, sup

__all__ = ["sup"]  # the fixture, shared with test_summarize


async def test_failure_keeps_everything_and_the_periodic_check_retries(
    db: Database, sup: TaskSupervisor
) -> None:
    sid = await new_session(db)
    await add_messages(db, sid, 30)
    provider = ScriptedProvider(["S1", ScriptedTurn(fail=True), "S2"])
    now = [1_000_000.0]
    summarizer = make(db, provider, sup, clock=lambda: now[0])
    assert await summarizer.summarize_session(sid)
    first = await summarizer.repo.get(sid)
    await add_messages(db, sid, 15)
    before = await all_messages(db, sid)

    job = sup.every("summarize", HOUR, summarizer.check_all, run_at_start=True)
    failed = await job.wait_runs(1)

    assert len(provider.prompts) == 2  # the failing call was made
    assert failed.last_ok is False
    assert failed.last_error is not None and "SummarizationFailed" in failed.last_error
    assert "LLMError" in failed.last_error
    assert await summarizer.repo.get(sid) == first
    assert await all_messages(db, sid) == before

    # Held back for 5 minutes: a check before then does not ask the model again.
    job.wake()
    held = await job.wait_runs(2)
    assert held.last_result == "0 of 0 due sessions summarized" and len(provider.prompts) == 2
    now[0] += 301
    job.wake()
    retried = await job.wait_runs(3)

    assert retried.last_ok is True and retried.last_result == "1 of 1 due sessions summarized"
    stored = await summarizer.repo.get(sid)
    assert stored is not None and (stored.summary, stored.covered_seq) == ("S2", 35)
    assert "S1" in provider.prompts[2][-1].content
    assert await all_messages(db, sid) == before


async def test_sessions_that_keep_failing_cannot_starve_the_others(
    db: Database, sup: TaskSupervisor
) -> None:
    # Two big sessions the model always refuses (a content filter, say) and a smaller
    # one it can summarize, with room for two sessions per check.
    refused = [await new_session(db) for _ in range(2)]
    for sid in refused:
        await add_messages(db, sid, 40)
    fine = await new_session(db)
    await add_messages(db, fine, 30)
    provider = ScriptedProvider([ScriptedTurn(fail=True), ScriptedTurn(fail=True), "S"])
    now = [1_000_000.0]
    summarizer = make(db, provider, sup, clock=lambda: now[0], per_check=2)
    with pytest.raises(SummarizationFailed, match="2 of 2 due sessions failed"):
        await summarizer.check_all()
    assert await summarizer.repo.get(fine) is None
    # Before, the same two came first in every check and the third never got its turn.
    assert await summarizer.check_all() == "1 of 1 due sessions summarized"
    stored = await summarizer.repo.get(fine)
    assert stored is not None and stored.summary == "S"
    assert len(provider.prompts) == 3
    # A turn in a refused session does not ask the model again while it is held back.
    assert not await summarizer.summarize_session(refused[0])
    assert len(provider.prompts) == 3


async def test_check_all_raises_when_a_session_fails(db: Database, sup: TaskSupervisor) -> None:
    sid = await new_session(db)
    await add_messages(db, sid, 30)
    summarizer = make(db, ScriptedProvider([ScriptedTurn(fail=True)]), sup)
    with pytest.raises(SummarizationFailed, match="1 of 1 due sessions failed"):
        await summarizer.check_all()
    assert await summarizer.repo.get(sid) is None
