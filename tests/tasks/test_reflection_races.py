"""Purges racing reflections and digests: what the model read while a purge ran never
comes back, a digest is rebuilt only from all its sources, a purge cut short can be
run again.

Each race is an explicit interleaving: the provider holds one answer (the model
"thinks") until the test has run the purge.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from types import ModuleType
from typing import Any

import pytest

from picobot.llm.base import ChatMessage, Completion, ToolSpec
from picobot.llm.scripted import ScriptedProvider, ScriptedTurn
from picobot.privacy.controller import PrivacyController
from picobot.privacy.scopes import Actor, SessionScope
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.erasure.purge import PurgeStore
from picobot.store.learned import digest_purge, fact_purge
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.retrieval.recall import RecallQuery, recall_records
from tests.tasks.test_learning import T0
from tests.tasks.test_reflection import ALICE, chat, layers, reflection, task

SECRET = "purgedzzx"
"""A word only the purged session (and what was derived from it) holds."""


class HeldProvider(ScriptedProvider):
    """Scripted, but call number ``hold_call`` (0-based) answers only once ``go`` is set;
    ``thinking`` is set while it waits."""

    def __init__(self, turns: Sequence[ScriptedTurn | str], hold_call: int) -> None:
        super().__init__(turns)
        self.hold_call = hold_call
        self.calls = 0
        self.thinking = asyncio.Event()
        self.go = asyncio.Event()

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> Completion:
        held = self.calls == self.hold_call
        self.calls += 1
        answer = await super().complete(messages, tools)  # read its prompt, made its answer
        if held:
            self.thinking.set()
            await self.go.wait()
        return answer


async def run_while_thinking(
    provider: HeldProvider, work: Awaitable[Any], meanwhile: Callable[[], Awaitable[None]]
) -> Any:
    """Start ``work``, run ``meanwhile`` while the held call waits, then let it answer."""
    running = asyncio.ensure_future(work)
    await provider.thinking.wait()
    await meanwhile()
    provider.go.set()
    return await running


async def nothing_left_of_the_secret(db: Database) -> None:
    assert not any(SECRET in r.text for r in await layers(db))
    query = RecallQuery(ALICE, [SECRET], include_digests=True)
    assert await db.read(lambda c: recall_records(c, query)) == []


async def test_a_purge_during_a_rebuild_keeps_the_purged_text_out(db: Database) -> None:
    now = [T0 + 10_000]
    sids = [await chat(db, ALICE, [f"topic {w}", "ok"], at=T0 + i) for i, w in enumerate("ab")]
    sids.append(await chat(db, ALICE, ["topic c", "ok"], at=T0 + 2))
    answers = [reflection("about a"), reflection(f"about {SECRET}"), reflection("about c")]
    provider = HeldProvider([*answers, "Digest of a, b and c"], hold_call=4)
    reflect = task(db, provider, now, digest_fanout=3, digest_levels=1)
    await reflect.check_idle()
    await PurgeStore(db).delete_session(sids[2])  # the digest is stale, a and b remain
    now[0] += 10
    provider.add(f"Digest of a and {SECRET}")  # made from the reflections read

    async def purge() -> None:
        await PurgeStore(db).delete_session(sids[1])

    assert await run_while_thinking(provider, reflect.rebuild_stale(), purge) == 0
    [digest] = [r for r in await layers(db) if r.level == 1]
    assert digest.stale and digest.text == ""  # nothing stored: rebuilt next time
    await nothing_left_of_the_secret(db)
    now[0] += 10
    provider.add("Digest of a alone")
    assert await reflect.rebuild_stale() == 1
    assert SECRET not in provider.prompts[-1][1].content
    [digest] = [r for r in await layers(db) if r.level == 1]
    assert (digest.text, digest.stale) == ("Digest of a alone", False)


async def test_a_fold_keeps_out_a_source_purged_and_rebuilt_meanwhile(db: Database) -> None:
    now = [T0 + 10_000]
    sids = [await chat(db, ALICE, [f"topic {w}", "ok"], at=T0 + i) for i, w in enumerate("abc")]
    answers = [reflection("about a"), reflection(f"about {SECRET}"), f"Digest of a and {SECRET}"]
    answers.append(reflection("about c"))
    # Calls 4 and 5 are the reflection of d and the digest of c and d; 6 folds level 2.
    provider = HeldProvider(answers, hold_call=6)
    reflect = task(db, provider, now, digest_fanout=2, digest_levels=2)
    await reflect.check_idle()
    last = await chat(db, ALICE, ["topic d", "ok"], at=T0 + 3)
    provider.add(reflection("about d"), "Digest of c and d", f"Long term: a {SECRET} c d")

    async def purge_and_rebuild() -> None:
        await PurgeStore(db).delete_session(sids[1])
        now[0] += 10
        provider.add("Digest of a alone")
        assert await reflect.rebuild_stale() == 1  # the source is fresh again
        provider.add("Long term: a c d")  # the fold made again from what is there

    done = await run_while_thinking(provider, reflect.reflect_session(last), purge_and_rebuild)
    assert done.stored
    [top] = [r for r in await layers(db) if r.level == 2]
    assert top.text == "Long term: a c d"
    await nothing_left_of_the_secret(db)


async def test_a_digest_waits_for_its_stale_sources_before_its_rebuild(db: Database) -> None:
    now = [T0 + 10_000]
    sids = [await chat(db, ALICE, [f"topic {w}", "ok"], at=T0 + i) for i, w in enumerate("abcd")]
    answers = [reflection("about a"), reflection("about b"), "Digest of a and b"]
    answers += [reflection("about c"), reflection("about d"), "Digest of c and d"]
    answers += ["Long term: a b c d"]
    provider = HeldProvider(answers, hold_call=-1)
    reflect = task(db, provider, now, digest_fanout=2, digest_levels=2)
    await reflect.check_idle()
    await PurgeStore(db).delete_session(sids[1])
    provider.add(ScriptedTurn(fail=True), "Long term: c d only")
    calls = len(provider.prompts)
    now[0] += 10
    assert await reflect.rebuild_stale() == 0
    assert len(provider.prompts) == calls + 1  # the level-1 digest failed; its parent waits
    [top] = [r for r in await layers(db) if r.level == 2]
    assert (top.text, top.stale) == ("", True)

    provider = HeldProvider(["Digest of a alone", "Long term: a c d"], hold_call=-1)
    reflect = task(db, provider, now, digest_fanout=2, digest_levels=2)
    now[0] += 10
    assert await reflect.rebuild_stale() == 2
    assert "Digest of a alone" in provider.prompts[1][1].content
    assert "Digest of c and d" in provider.prompts[1][1].content
    rows = await layers(db)
    assert [(r.level, r.text, r.stale) for r in rows if r.level > 0] == [
        (1, "Digest of a alone", False),
        (1, "Digest of c and d", False),
        (2, "Long term: a c d", False),
    ]


@pytest.mark.parametrize("module", [digest_purge, fact_purge], ids=["layers", "facts"])
async def test_a_session_purge_cut_short_can_be_run_again(
    db: Database, module: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [T0 + 10_000]
    sid = await chat(db, ALICE, [f"I like {SECRET} tea", "ok"], at=T0)
    provider = HeldProvider([reflection(f"likes {SECRET} tea")], hold_call=-1)
    await task(db, provider, now).check_idle()
    fact = Observation("tea", "preference", f"likes {SECRET}")
    await FactStore(db).observe(ALICE, [fact], session_id=sid, message_id=1, now=T0)
    real = module._delete

    async def crash(*args: Any) -> Any:
        monkeypatch.setattr(module, "_delete", real)  # as if the process died here
        raise RuntimeError("killed")

    monkeypatch.setattr(module, "_delete", crash)
    privacy = PrivacyController(db)
    actor = Actor(ALICE)
    with pytest.raises(RuntimeError, match="killed"):
        await privacy.execute(await privacy.plan(SessionScope(sid), actor))
    # The user can still purge the session: it was not deleted without what it taught.
    assert await SessionRepo(db).get(sid) is not None
    result = await privacy.execute(await privacy.plan(SessionScope(sid), actor))
    assert result.counts.sessions == 1 and result.counts.digests == 1
    assert result.counts.facts == 1
    assert await SessionRepo(db).get(sid) is None
    await nothing_left_of_the_secret(db)
    row = await db.fetchone(
        "SELECT (SELECT COUNT(*) FROM facts) + (SELECT COUNT(*) FROM fact_sources)"
        " + (SELECT COUNT(*) FROM digests)"
    )
    assert row is not None and row[0] == 0


async def test_a_purge_of_a_session_gone_already_takes_what_it_taught(db: Database) -> None:
    now = [T0 + 10_000]
    sid = await chat(db, ALICE, [f"I like {SECRET} tea", "ok"], at=T0)
    await task(db, HeldProvider([reflection(SECRET)], hold_call=-1), now).check_idle()
    fact = Observation("tea", "preference", f"likes {SECRET}")
    await FactStore(db).observe(ALICE, [fact], session_id=sid, message_id=1, now=T0)
    # What a purge cut short by an older version could leave: the session row went first.
    await db.execute_write("DELETE FROM sessions WHERE id = ?", (sid,))
    done = await PurgeStore(db).delete_session(sid)
    assert (done.sessions, done.facts, done.digests) == (0, 1, 1)
    await nothing_left_of_the_secret(db)
