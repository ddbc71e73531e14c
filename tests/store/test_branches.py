"""Edit branches in the store: what a fork before a message copies, and what the prompt
of a branch (and of a branch of a branch) leaves out of the ancestors' records."""

from __future__ import annotations

from picobot.store.conversation.branches import cuts, hidden_from
from picobot.store.conversation.messages import MessageRepo, StoredMessage
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.learned.digests import DigestStore, Provenance, user_digests
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore

USER = "tui:ana"
CHAT = ("tui", "local", USER)


async def session_with(db: Database, *texts: str) -> tuple[str, list[StoredMessage]]:
    sid = await SessionRepo(db).create(*CHAT)
    return sid, [await write(db, sid, text) for text in texts]


async def write(db: Database, sid: str, text: str) -> StoredMessage:
    role = "user" if text.startswith("u") else "assistant"
    return await MessageRepo(db).append(sid, role, text, 1, created_at=1.0)


async def fork(db: Database, parent: str, before_seq: int | None = None) -> str:
    return await SessionRepo(db).create(*CHAT, parent_session_id=parent, before_seq=before_seq)


async def contents(db: Database, sid: str) -> list[str]:
    return [m.content for m in await MessageRepo(db).last(sid, 100)]


async def cuts_of(db: Database, sid: str) -> list[tuple[str, int]]:
    return await db.read(lambda conn: cuts(conn, sid))


async def test_a_fork_before_a_message_copies_only_what_came_before(db: Database) -> None:
    parent, _ = await session_with(db, "u1", "a2", "u3", "a4")
    branch = await fork(db, parent, before_seq=3)
    assert await contents(db, branch) == ["u1", "a2"]
    assert await contents(db, parent) == ["u1", "a2", "u3", "a4"]
    # The branch's next message takes the edited one's number.
    assert (await write(db, branch, "u3 again")).seq_order == 3
    whole = await fork(db, parent)  # /fork: everything
    assert await contents(db, whole) == ["u1", "a2", "u3", "a4"]


async def test_sessions_that_edited_nothing_hide_nothing(db: Database) -> None:
    parent, _ = await session_with(db, "u1", "a2")
    assert await cuts_of(db, parent) == []
    assert await cuts_of(db, await fork(db, parent)) == []


async def test_a_branch_hides_its_parent_from_the_edit_on_even_what_comes_later(
    db: Database,
) -> None:
    parent, said = await session_with(db, "u1", "a2", "u3", "a4")
    branch = await fork(db, parent, before_seq=3)
    later = await write(db, parent, "u5 said in the old branch afterwards")
    hidden = await db.read(lambda conn: hidden_from(conn, branch))
    assert hidden.message_ids == {said[2].id, said[3].id, later.id}
    # The parent hides nothing of the branch: it is the user's other conversation.
    assert await cuts_of(db, parent) == []


async def test_the_cut_follows_the_copies_up_the_family(db: Database) -> None:
    p, _ = await session_with(db, "u1", "a2", "u3", "a4")
    e = await fork(db, p, before_seq=3)  # P's u3 replaced
    await write(db, e, "u3 edited")
    await write(db, e, "a4 edited")
    f = await fork(db, e)  # a plain fork of the branch copies E's 4 messages
    assert await cuts_of(db, f) == [(p, 3)]
    await write(db, f, "u5 of f")
    await write(db, f, "a6 of f")
    # Editing a message F wrote itself leaves F's parent alone, not P's replaced part.
    g = await fork(db, f, before_seq=5)
    assert await cuts_of(db, g) == [(f, 5), (p, 3)]
    # Editing a copy (F's 2 is E's, which is P's) hides from that point all the way up.
    h = await fork(db, f, before_seq=2)
    assert await cuts_of(db, h) == [(f, 2), (e, 2), (p, 2)]
    # A fork from before fork points were recorded counts as a copy of its whole parent.
    await db.execute_write("UPDATE sessions SET fork_seq = NULL WHERE id = ?", (f,))
    assert await cuts_of(db, g) == [(f, 5), (e, 5), (p, 3)]


async def test_a_cycle_of_parents_ends_the_walk(db: Database) -> None:
    a, _ = await session_with(db, "u1", "a2")
    b = await fork(db, a, before_seq=1)
    await db.execute_write("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (b, a))
    assert await cuts_of(db, b) == [(a, 1)]


async def test_reflections_digests_and_facts_of_the_replaced_part_are_hidden(
    db: Database,
) -> None:
    parent, said = await session_with(db, "u1", "a2", "u3", "a4")
    layers = DigestStore(db)

    def covering(first: StoredMessage, last: StoredMessage) -> Provenance:
        return Provenance(parent, first.id, last.id, first.seq_order, last.seq_order)

    kept = await layers.add_reflection(USER, covering(said[0], said[1]), "early", 1, now=1.0)
    gone = await layers.add_reflection(USER, covering(said[2], said[3]), "late", 1, now=1.0)
    rows = {d.id: d for d in await db.read(lambda conn: user_digests(conn, USER))}
    above_gone = await layers.add_digest(USER, 1, [rows[gone]], "folds late", 1, now=2.0)
    above_kept = await layers.add_digest(USER, 1, [rows[kept]], "folds early", 1, now=2.0)
    assert above_gone is not None and above_kept is not None

    async def learn(category: str, text: str, source: StoredMessage) -> int:
        applied = await FactStore(db).observe(
            USER,
            [Observation(None, category, text)],
            session_id=parent,
            message_id=source.id,
            now=1,
        )
        return applied[0].fact_id

    early = await learn("preference", "tea", said[0])
    late = await learn("personal", "Lisbon", said[3])
    # Confirmed in the replaced part: it may have been reworded there, so it is hidden too.
    both = await learn("plan", "trip", said[0])
    assert await learn("plan", "trip", said[2]) == both
    branch = await fork(db, parent, before_seq=3)
    hidden = await db.read(lambda conn: hidden_from(conn, branch))
    assert hidden.layer_ids == {gone, above_gone}
    assert hidden.fact_ids == {late, both}
    assert early not in hidden.fact_ids
    assert hidden.hides("reflection", gone) and hidden.hides("digest", above_gone)
    assert not hidden.hides("reflection", kept) and not hidden.hides("message", said[0].id)
    assert hidden.hides("message", said[2].id) and hidden.hides("fact", late)
    assert not hidden.hides("memory", late)  # another kind's id space
