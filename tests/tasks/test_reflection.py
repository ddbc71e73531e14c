"""Reflections and digests: when they are made, what the model sees, what is stored."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from picobot.config.learning import LearningSettings
from picobot.config.settings import Settings
from picobot.llm.scripted import ScriptedProvider, ScriptedTurn
from picobot.messages import Identity
from picobot.privacy.redaction import Redactor
from picobot.runtime import open_runtime
from picobot.store.conversation.events import EventFilter, list_events
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.erasure.purge import PurgeStore
from picobot.store.learned.digests import Digest, user_digests
from picobot.store.retrieval.recall import RecallQuery, recall_records
from picobot.store.retrieval.search import SearchIndex
from picobot.tasks.reflection import ReflectionTask
from picobot.text.tokens import CharTokenEstimator
from tests.memory.test_learning_turns import say
from tests.tasks.test_learning import KEY, T0

ALICE, BOB = "tui:alice", "tui:bob"
IDENT = Identity("tui", ALICE, "local")


def reflection(*words: str) -> str:
    return "What happened: " + " ".join(words) + ". Decisions: none. Open items: none."


async def chat(db: Database, user: str, lines: list[str], at: float = T0) -> str:
    """A new session of ``user`` holding ``lines`` (user, assistant, ...), last active ``at``."""
    sid = await SessionRepo(db).create("tui", user, user)
    for i, line in enumerate(lines):
        role = "user" if i % 2 == 0 else "assistant"
        await MessageRepo(db).append(sid, role, line, len(line) // 4, created_at=at)
    await db.execute_write("UPDATE sessions SET last_active = ? WHERE id = ?", (at, sid))
    return sid


def task(
    db: Database, provider: ScriptedProvider, now: list[float], **kw: object
) -> ReflectionTask:
    db.redact = Redactor().redact  # as the runtime does: the store's redactor is used
    return ReflectionTask(
        db,
        provider,
        CharTokenEstimator(),
        LearningSettings(**kw),  # type: ignore[arg-type]
        clock=lambda: now[0],
    )


async def layers(db: Database, user: str = ALICE) -> list[Digest]:
    return await db.read(lambda c: user_digests(c, user))


async def test_idle_sessions_get_a_reflection_with_provenance_even_when_short(db: Database) -> None:
    now = [T0 + 100]
    sid = await chat(db, ALICE, ["I plan a trip to Oslo", "Sounds good"], at=T0)
    await chat(db, BOB, ["hello", "hi"], at=T0 + 90)  # not idle long enough yet
    provider = ScriptedProvider([reflection("planned a trip to Oslo")])
    reflect = task(db, provider, now, idle_secs=60)
    assert (await reflect.check_idle()).startswith("1 reflections of 1 idle sessions")
    assert len(provider.prompts) == 1
    assert '<data source="conversation"' in provider.prompts[0][1].content
    assert "I plan a trip to Oslo" in provider.prompts[0][1].content
    [row] = await layers(db)
    ids = await db.fetchall("SELECT id FROM messages WHERE session_id = ? ORDER BY id", (sid,))
    assert (row.level, row.session_id, row.first_seq, row.last_seq) == (0, sid, 1, 2)
    assert (row.first_message_id, row.last_message_id) == (ids[0][0], ids[1][0])
    assert row.text == reflection("planned a trip to Oslo")
    await reflect.check_idle()  # nothing new in Alice's session; Bob's still not idle
    assert len(provider.prompts) == 1
    events = await db.read(lambda c: list_events(c, EventFilter(types=("reflection.stored",)), 5))
    assert [(e.user_id, e.session_id, e.payload["reflection_id"]) for e in events] == [
        (ALICE, sid, row.id)
    ]
    assert "Oslo" not in json.dumps([e.payload for e in events])


async def test_secrets_are_redacted_before_and_after_and_answers_are_bounded(
    db: Database,
) -> None:
    now = [T0 + 10_000]
    await chat(db, ALICE, [f"my key is {KEY}", "noted"])
    long = reflection(f"shared the key {KEY}", *(["and more"] * 200))
    provider = ScriptedProvider([long])
    await task(db, provider, now, reflection_max_words=40).check_idle()
    assert KEY not in provider.prompts[0][1].content
    [row] = await layers(db)
    assert KEY not in row.text and "[REDACTED" in row.text
    assert len(row.text.split()) <= 40


async def test_junk_is_dropped_without_content_and_not_asked_for_again(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    now = [T0 + 10_000]
    sid = await chat(db, ALICE, ["hello secretwordx", "hi"])
    provider = ScriptedProvider(["I'm sorry, I can't help with that.", reflection("x")])
    reflect = task(db, provider, now)
    done = await reflect.reflect_session(sid)
    assert not done.stored and done.messages == 2
    await reflect.check_idle()
    assert len(provider.prompts) == 1
    assert [r.text for r in await layers(db)] == [""]  # only marks the range as read
    assert "dropped an empty, refusing or too short reflection answer" in caplog.text
    assert "secretwordx" not in caplog.text and "sorry" not in caplog.text.lower()
    assert (
        await db.read(lambda c: list_events(c, EventFilter(types=("reflection.stored",)), 5)) == []
    )


async def test_a_failed_call_stores_nothing_and_backs_off(db: Database) -> None:
    now = [T0 + 10_000]
    sid = await chat(db, ALICE, ["hello", "hi"])
    provider = ScriptedProvider([ScriptedTurn(fail=True), reflection("said hello")])
    reflect = task(db, provider, now)
    assert (await reflect.reflect_session(sid)).failed
    await reflect.check_idle()  # held back
    assert len(provider.prompts) == 1 and await layers(db) == []
    now[0] += 3600
    await reflect.check_idle()
    assert [r.text for r in await layers(db)] == [reflection("said hello")]


async def test_ten_reflections_fold_into_a_period_digest_and_ten_of_those_into_long_term(
    db: Database,
) -> None:
    now = [T0 + 10_000]
    for i in range(9):
        await chat(db, ALICE, [f"topic number{i}x", "ok"], at=T0 + i)
    provider = ScriptedProvider([reflection(f"talked about number{i}x") for i in range(9)])
    reflect = task(db, provider, now)
    await reflect.check_idle()
    assert [r.level for r in await layers(db)] == [0] * 9  # nine: nothing folds yet
    await chat(db, ALICE, ["topic number9x", "ok"], at=T0 + 9)
    digest = "Period: " + " ".join(f"number{i}x" for i in range(10)) + " word" * 500
    provider.add(reflection("talked about number9x"), digest)
    await reflect.check_idle()
    rows = await layers(db)
    [period] = [r for r in rows if r.level == 1]
    assert all(r.parent_id == period.id for r in rows if r.level == 0)
    fold_prompt = provider.prompts[-1][1].content
    assert all(f"number{i}x" in fold_prompt for i in range(10))
    assert CharTokenEstimator().estimate(period.text) <= 250  # digest_max_tokens
    events = await db.read(lambda c: list_events(c, EventFilter(types=("digest.updated",)), 5))
    assert [(e.payload["level"], e.payload["sources"]) for e in events] == [(1, 10)]
    await SearchIndex(db).index_pending()  # the messages too, as the runtime's indexer does
    query = RecallQuery(ALICE, ["number3x"], include_digests=True)
    hits = await db.read(lambda c: recall_records(c, query))
    assert "message" in {h.kind for h in hits}
    assert {(h.kind, h.row_id) for h in hits if h.kind != "message"} == {
        ("digest", period.id),
        ("reflection", rows[3].id),
    }
    plain = await db.read(lambda c: recall_records(c, RecallQuery(ALICE, ["number3x"])))
    assert {h.kind for h in plain} == {"message"}  # only when asked for
    # A digest matches much; a prompt takes at most recall_max_digests of them, the best.
    every = [f"number{i}x" for i in range(8)]
    wide = await db.read(
        lambda c: recall_records(c, RecallQuery(ALICE, every, include_digests=True))
    )
    one = RecallQuery(ALICE, every, include_digests=True, max_digests=1)
    capped = await db.read(lambda c: recall_records(c, one))
    layered = [h for h in wide if h.kind != "message"]
    assert len(layered) > 1
    assert [h for h in capped if h.kind != "message"] == layered[:1]
    assert [h for h in capped if h.kind == "message"] == [h for h in wide if h.kind == "message"]


async def test_digest_levels_fold_by_the_configured_fanout(db: Database) -> None:
    now = [T0 + 10_000]
    for i in range(4):
        await chat(db, ALICE, [f"topic {i}", "ok"], at=T0 + i)
    answers = [reflection(f"topic {i}") for i in range(2)] + ["Digest one of two topics"]
    answers += [reflection(f"topic {i}") for i in range(2, 4)] + ["Digest two of two topics"]
    answers += ["Long term digest of four topics"]
    provider = ScriptedProvider(answers)
    await task(db, provider, now, digest_fanout=2, digest_levels=2).check_idle()
    rows = await layers(db)
    assert [r.level for r in rows] == [0, 0, 0, 0, 1, 1, 2]
    [top] = [r for r in rows if r.level == 2]
    assert top.text == "Long term digest of four topics" and top.parent_id is None
    assert {r.parent_id for r in rows if r.level == 1} == {top.id}


async def test_a_session_purge_takes_its_reflection_and_rebuilds_the_digests_above(
    db: Database,
) -> None:
    now = [T0 + 10_000]
    sids = [await chat(db, ALICE, [f"topic {w}", "ok"], at=T0 + i) for i, w in enumerate("abc")]
    sids += [await chat(db, ALICE, ["topic purgedzzx", "ok"], at=T0 + 5)]
    answers = [reflection("about a"), reflection("about b"), "Digest of a and b topics"]
    answers += [reflection("about c"), reflection("about purgedzzx"), "Digest of c purgedzzx"]
    answers += ["Long term: a b c purgedzzx"]
    provider = ScriptedProvider(answers)
    reflect = task(db, provider, now, digest_fanout=2, digest_levels=2)
    await reflect.check_idle()
    assert len(await layers(db)) == 7
    counts = await PurgeStore(db).count_session(sids[3])
    done = await PurgeStore(db).delete_session(sids[3])
    assert counts.digests == done.digests == 1
    rows = await layers(db)
    stale = [r for r in rows if r.stale]
    assert [(r.level, r.text) for r in stale] == [(1, ""), (2, "")]  # emptied at once
    assert not any("purgedzzx" in r.text for r in rows)
    hits = await db.read(
        lambda c: recall_records(c, RecallQuery(ALICE, ["purgedzzx"], include_digests=True))
    )
    assert hits == []
    provider.add("Digest of c alone", "Long term: a b c")
    assert "2 digests rebuilt" in await reflect.check_idle()
    assert all("purgedzzx" not in m.content for p in provider.prompts[-2:] for m in p)
    rows = await layers(db)
    assert [(r.level, r.text, r.stale) for r in rows if r.level > 0] == [
        (1, "Digest of a and b topics", False),
        (1, "Digest of c alone", False),
        (2, "Long term: a b c", False),
    ]


async def test_a_digest_left_without_sources_is_deleted(db: Database) -> None:
    now = [T0 + 10_000]
    sids = [await chat(db, ALICE, [f"topic {w}", "ok"], at=T0 + i) for i, w in enumerate("ab")]
    provider = ScriptedProvider([reflection("a"), reflection("b"), "Digest of a and b"])
    reflect = task(db, provider, now, digest_fanout=2)
    await reflect.check_idle()
    for sid in sids:
        await PurgeStore(db).delete_session(sid)
    await reflect.check_idle()
    assert await layers(db) == []


async def test_users_never_recall_each_others_reflections_or_digests(db: Database) -> None:
    now = [T0 + 10_000]
    for i in range(2):
        await chat(db, ALICE, [f"my cat kiwizzx {i}", "cute"], at=T0 + i)
    for i in range(2):
        await chat(db, BOB, [f"my dog rexzzx {i}", "nice"], at=T0 + 2 + i)
    answers = [reflection("talked about kiwizzx"), reflection("kiwizzx again")]
    answers += ["Digest: the cat kiwizzx", reflection("about rexzzx"), reflection("rexzzx again")]
    answers += ["Digest: the dog rexzzx"]
    await task(db, ScriptedProvider(answers), now, digest_fanout=2).check_idle()
    assert [r.level for r in await layers(db, ALICE)] == [0, 0, 1]
    assert [r.level for r in await layers(db, BOB)] == [0, 0, 1]
    await SearchIndex(db).index_pending()  # as the runtime's indexer does (PostgreSQL queues)

    hits: dict[str, set[str]] = {}
    for user in (ALICE, BOB):
        for word in ("kiwizzx", "rexzzx"):
            query = RecallQuery(user, [word], include_digests=True)
            found = await db.read(lambda c, q=query: recall_records(c, q))
            hits[f"{user} {word}"] = {h.kind for h in found if h.kind != "message"}
    assert hits == {
        f"{ALICE} kiwizzx": {"reflection", "digest"},
        f"{ALICE} rexzzx": set(),
        f"{BOB} kiwizzx": set(),
        f"{BOB} rexzzx": {"reflection", "digest"},
    }


async def test_new_reflects_on_the_session_left_behind_and_reflect_on_the_current(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider(
        ["Enjoy Kyoto!", reflection("planned kyotozzx"), "Sure.", "[]", reflection("asked x")]
    )
    config = Settings(data={"dir": str(tmp_path / "data")}, llm={"provider": "scripted"})
    async with open_runtime(config, provider=provider) as rt:
        first = (await say(rt, IDENT, "I go to kyotozzx in May"))[-1].session_id
        await say(rt, IDENT, "/new")
        await rt.tasks.join()  # the reflection runs in the background
        assert "reflection" in provider.prompts[1][0].content
        second = (await say(rt, IDENT, "what should I pack?"))[-1].session_id
        reply = "\n".join(e.text for e in await say(rt, IDENT, "/reflect"))
        rows = await layers(rt.db, IDENT.user_id)
        # A later turn recalls the reflection within the budget, as quoted data.
        await say(rt, IDENT, "remind me about kyotozzx")
    assert [(r.session_id, r.text) for r in rows] == [
        (first, reflection("planned kyotozzx")),
        (second, reflection("asked x")),
    ]
    assert "A reflection of this conversation is stored." in reply
    recalled = [m.content for m in provider.prompts[-1] if m.role == "user"]
    assert any("reflection: " + reflection("planned kyotozzx") in c for c in recalled)


async def test_learning_off_makes_no_reflection_and_recalls_none(tmp_path: Path) -> None:
    provider = ScriptedProvider(["ok", "ok"])
    config = Settings(
        data={"dir": str(tmp_path / "data")},
        llm={"provider": "scripted"},
        memory={"learning": {"reflections": False}},
    )
    async with open_runtime(config, provider=provider) as rt:
        await say(rt, IDENT, "I go to kyotozzx")
        await say(rt, IDENT, "/new")
        await rt.tasks.join()
        assert rt.learning is not None
        assert await rt.learning.reflections.check_idle() == "disabled"
        rows = await layers(rt.db, IDENT.user_id)
    assert rows == [] and len(provider.prompts) == 1


async def test_a_stored_summary_ends_the_session_and_its_reflection_reads_it(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider(["ok", "Alice lives in Oslo.", reflection("moved to Oslo")])
    config = Settings(
        data={"dir": str(tmp_path / "data")},
        llm={"provider": "scripted"},
        session={"memory": {"summarization_trigger_tokens": 100, "summarization_keep_recent": 0}},
        memory={"learning": {"idle_secs": 10_000}},
    )
    async with open_runtime(config, provider=provider) as rt:
        assert rt.learning is not None
        rt.learning.settings = rt.learning.settings.model_copy(update={"enabled": False})
        rt.learning.reflections.settings = config.memory.learning  # extraction off, not this
        await say(rt, IDENT, "I live in Oslo. " + "More words about my town. " * 30)
        await rt.tasks.join()  # the summary, then the reflection it started
        rows = await layers(rt.db, IDENT.user_id)
    assert "summary" in provider.prompts[1][0].content
    assert '<data source="summary"' in provider.prompts[2][1].content
    assert "Alice lives in Oslo." in provider.prompts[2][1].content
    assert [r.text for r in rows] == [reflection("moved to Oslo")]


async def test_a_purged_reflection_leaves_the_prompt_at_once(tmp_path: Path) -> None:
    provider = ScriptedProvider(["Have fun!", reflection("planned the kyotozzx trip")])
    config = Settings(data={"dir": str(tmp_path / "data")}, llm={"provider": "scripted"})
    async with open_runtime(config, provider=provider) as rt:
        first = (await say(rt, IDENT, "I travel to Japan in May"))[-1].session_id or ""
        await say(rt, IDENT, "/new")
        await rt.tasks.join()
        await say(rt, IDENT, "what about kyotozzx?")  # recalls the reflection only
        shown = provider.prompts[-1]
        await PurgeStore(rt.db).delete_session(first)
        await say(rt, IDENT, "and kyotozzx hotels?")  # the same session's next turn
        after = provider.prompts[-1]
    text = reflection("planned the kyotozzx trip")
    assert any(text in m.content for m in shown)
    assert not any(text in m.content for m in after)
