"""/learning off: fact extraction, reply markers and reflections skip the user at once."""

from __future__ import annotations

from picobot.llm.scripted import ScriptedProvider
from picobot.store.conversation.preferences import PreferenceStore
from picobot.store.db import Database
from picobot.store.learned.digests import user_digests
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore
from tests.tasks.test_learning import T0, answer, chat, facts
from tests.tasks.test_learning import task as learning_task
from tests.tasks.test_reflection import chat as new_session
from tests.tasks.test_reflection import reflection
from tests.tasks.test_reflection import task as reflection_task


async def test_no_fact_is_stored_for_a_user_with_learning_off(db: Database) -> None:
    sid = await chat(db, "tui:alice", ["I live in Oslo", "nice"])
    await PreferenceStore(db).set("tui:alice", "learning", False, T0)
    found = [Observation(None, "personal", "lives in Oslo")]
    # A reply's markers and an extraction answer already on its way both end here.
    applied = await FactStore(db).observe("tui:alice", found, session_id=sid, message_id=1, now=T0)
    assert applied == [] and await facts(db) == []
    await FactStore(db).observe("tui:bob", found, session_id=None, message_id=None, now=T0)
    assert await facts(db) == ["lives in Oslo"]  # only Alice's switch is off


async def test_extraction_skips_the_user_and_never_learns_those_messages_later(
    db: Database,
) -> None:
    now = [T0 + 100]
    await chat(db, "tui:alice", ["I live in Oslo", "nice"], at=T0)
    prefs = PreferenceStore(db)
    await prefs.set("tui:alice", "learning", False, T0)
    provider = ScriptedProvider([answer("lives in Oslo")])
    await learning_task(db, provider, now, idle_secs=60).check_idle()
    assert provider.prompts == [] and await facts(db) == []
    await prefs.set("tui:alice", "learning", True, T0)
    again = ScriptedProvider([answer("lives in Oslo")])
    await learning_task(db, again, now, idle_secs=60).check_idle()
    assert again.prompts == [] and await facts(db) == []  # said while off: not learned


async def test_reflections_skip_a_user_with_learning_off(db: Database) -> None:
    now = [T0 + 1000]
    sid = await new_session(db, "tui:alice", ["we planned the trip", "ok"], at=T0)
    await PreferenceStore(db).set("tui:alice", "learning", False, T0)
    provider = ScriptedProvider([reflection("trip")])
    result = await reflection_task(db, provider, now, idle_secs=60).reflect_session(sid)
    assert provider.prompts == [] and not result.stored
    rows = await db.read(lambda c: user_digests(c, "tui:alice"))
    assert [d.text for d in rows] == [""]  # an empty row covers the range, as junk does
    await PreferenceStore(db).set("tui:alice", "learning", True, T0)
    again = ScriptedProvider([reflection("trip")])
    await reflection_task(db, again, now, idle_secs=60).reflect_session(sid)
    assert again.prompts == []  # said while off: never reflected on
