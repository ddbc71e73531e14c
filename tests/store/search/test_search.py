"""The FTS5 recall index: kept in sync by triggers, scoped per user, ranked, safe."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from picobot.recall.keywords import extract_terms
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo, new_session_id
from picobot.store.db import Database
from picobot.store.migrations import MIGRATIONS, apply_migrations
from picobot.store.retrieval.search import (
    SearchIndex,
    SearchQuery,
    search_records,
    search_sql,
    user_token,
)
from picobot.store.retrieval.terms import term_prefix

ALICE = "telegram:1001"
BOB = "slack:T1:U2"


async def new_session(db: Database, user_id: str) -> str:
    return await SessionRepo(db).create("test", "chat-" + user_id, user_id)


async def old_session(db: Database, user_id: str) -> str:
    """A session in a database migrated only part way (the columns of m001, no events)."""
    sid = new_session_id()
    await db.execute_write(
        "INSERT INTO sessions (id, channel, chat_id, user_id, created_at, last_active)"
        " VALUES (?, 'test', ?, ?, 0, 0)",
        (sid, "chat-" + user_id, user_id),
    )
    return sid


async def inserted(db: Database, sql: str, params: tuple[object, ...]) -> int:
    """Run an ``INSERT ... RETURNING id``, committed; the new row's id."""
    return int(await db.write(lambda conn: conn.execute(sql, params).fetchone()[0]))


async def add_memory(db: Database, user_id: str, key: str, content: str) -> int:
    now = time.time()
    return await inserted(
        db,
        "INSERT INTO user_memories (user_id, key, content, created_at, updated_at)"
        " VALUES (?1, picobot_seal(?1, ?2), picobot_seal(?1, ?3), ?4, ?4) RETURNING id",
        (user_id, key, content, now),
    )


async def index_rows(db: Database) -> int:
    row = await db.fetchone("SELECT COUNT(*) FROM search_index")
    assert row is not None
    return int(row[0])


async def old_message(db: Database, sid: str, role: str, text: str) -> int:
    """Store a message in a database migrated only part way (the columns of m001)."""
    return await inserted(
        db,
        "INSERT INTO messages (session_id, seq_order, role, content, token_estimate,"
        " created_at) VALUES (?, (SELECT COALESCE(MAX(seq_order), 0) + 1 FROM messages"
        " WHERE session_id = ?), ?, ?, 4, 0) RETURNING id",
        (sid, sid, role, text),
    )


async def integrity_check(db: Database) -> None:
    """FTS5's own check on SQLite; on PostgreSQL, the index tables agree: each entry's
    length is its terms' frequencies summed, and no queued record has an entry."""
    if db.engine.name == "sqlite":
        async with db.transaction() as conn:
            await conn.execute(
                "INSERT INTO search_index (search_index, rank) VALUES ('integrity-check', 1)"
            )
        return
    wrong = await db.fetchone(
        "SELECT count(*) FROM search_index i WHERE length <>"
        " (SELECT COALESCE(sum(tf), 0) FROM search_terms t WHERE t.doc = i.rowid)"
    )
    queued = await db.fetchone(
        "SELECT count(*) FROM search_pending p JOIN search_index i ON i.rowid = p.id"
    )
    assert wrong is not None and queued is not None and (wrong[0], queued[0]) == (0, 0)


async def test_message_is_indexed_on_insert_and_maps_back(db: Database) -> None:
    sid = await new_session(db, ALICE)
    msg = await MessageRepo(db).append(sid, "user", "My cat Mochi hates the vacuum", 7)
    hits = await SearchIndex(db).search(ALICE, ["mochi"])
    assert len(hits) == 1
    hit = hits[0]
    assert (hit.kind, hit.row_id, hit.session_id, hit.seq_order) == ("message", msg.id, sid, 1)
    assert hit.text == msg.content and hit.created_at == msg.created_at and hit.score > 0


async def test_stemming_matches_other_word_forms(db: Database) -> None:
    sid = await new_session(db, ALICE)
    await MessageRepo(db).append(sid, "user", "we were hiking near the glaciers", 7)
    assert await SearchIndex(db).search(ALICE, ["glacier", "hike"])


async def test_tool_and_system_messages_are_not_indexed(db: Database) -> None:
    sid = await new_session(db, ALICE)
    await MessageRepo(db).append(sid, "tool", "recalled: zeppelin", 3)
    await MessageRepo(db).append(sid, "system", "zeppelin rules", 3)
    await MessageRepo(db).append(sid, "assistant", "The zeppelin landed.", 3)
    hits = await SearchIndex(db).search(ALICE, ["zeppelin"])
    assert [h.text for h in hits] == ["The zeppelin landed."]


async def test_deleting_a_message_or_its_session_removes_the_entry(db: Database) -> None:
    index = SearchIndex(db)
    sid = await new_session(db, ALICE)
    first = await MessageRepo(db).append(sid, "user", "walrus one", 2)
    await MessageRepo(db).append(sid, "user", "walrus two", 2)
    await db.execute_write("DELETE FROM messages WHERE id = ?", (first.id,))
    assert [h.text for h in await index.search(ALICE, ["walrus"])] == ["walrus two"]
    await db.execute_write("DELETE FROM sessions WHERE id = ?", (sid,))  # cascades
    assert await index.search(ALICE, ["walrus"]) == []
    assert await index_rows(db) == 0
    await integrity_check(db)


async def test_memory_insert_update_and_delete_keep_the_index_in_sync(db: Database) -> None:
    index = SearchIndex(db)
    mem_id = await add_memory(db, ALICE, "favorite_food", "ramen with extra garlic")
    hits = await index.search(ALICE, ["garlic"])
    assert [(h.kind, h.row_id, h.session_id, h.seq_order) for h in hits] == [
        ("memory", mem_id, None, None)
    ]
    assert hits[0].text == "favorite_food: ramen with extra garlic"
    assert await index.search(ALICE, ["favorite"])  # the key is searchable too

    await db.execute_write(
        "UPDATE user_memories SET content = picobot_seal(?, ?) WHERE id = ?",
        (ALICE, "pho with basil", mem_id),
    )
    assert await index.search(ALICE, ["garlic", "ramen"]) == []
    assert [h.row_id for h in await index.search(ALICE, ["basil"])] == [mem_id]

    await db.execute_write("DELETE FROM user_memories WHERE id = ?", (mem_id,))
    assert await index.search(ALICE, ["basil"]) == []
    assert await index_rows(db) == 0
    await integrity_check(db)


async def test_rolled_back_insert_leaves_no_index_entry(db: Database) -> None:
    sid = await new_session(db, ALICE)
    now = time.time()
    with pytest.raises(RuntimeError):
        async with db.transaction() as conn:
            await conn.execute(
                "INSERT INTO messages (session_id, seq_order, role, content, token_estimate,"
                " created_at) VALUES (?, 1, 'user', 'phantom platypus', 2, ?)",
                (sid, now),
            )
            await conn.execute(
                "INSERT INTO user_memories (user_id, key, content, created_at, updated_at)"
                " VALUES (?, 'pet', 'phantom platypus', ?, ?)",
                (ALICE, now, now),
            )
            raise RuntimeError("abort the turn")
    assert await SearchIndex(db).search(ALICE, ["platypus"]) == []
    assert await index_rows(db) == 0


async def test_recall_is_scoped_to_the_user(db: Database) -> None:
    index = SearchIndex(db)
    for user in (ALICE, BOB):
        sid = await new_session(db, user)
        await MessageRepo(db).append(sid, "user", f"my password hint is tangerine ({user})", 5)
        await add_memory(db, user, "fruit", f"tangerine for {user}")
    for user, other in ((ALICE, BOB), (BOB, ALICE)):
        hits = await index.search(user, ["tangerine"])
        assert len(hits) == 2
        assert all(user in h.text and other not in h.text for h in hits)
    assert await index.search("telegram:9999", ["tangerine"]) == []


async def test_a_term_spelled_like_another_users_token_reaches_nothing(db: Database) -> None:
    sid = await new_session(db, BOB)
    await MessageRepo(db).append(sid, "user", "secret plans", 2)
    sid = await new_session(db, ALICE)
    await MessageRepo(db).append(sid, "user", "harmless", 2)
    assert await SearchIndex(db).search(ALICE, [user_token(BOB), "plans", "secret"]) == []
    # Terms only look at the text, never at the owner column.
    assert await SearchIndex(db).search(ALICE, [user_token(ALICE)]) == []


async def test_the_index_token_is_the_python_token_for_any_user_id(db: Database) -> None:
    for user in ("tui:Zoë 🚀", "whatsapp:+15551234567@s.whatsapp.net", "tui:Zoë 🚀e"):
        sid = await new_session(db, user)
        await MessageRepo(db).append(sid, "user", f"kumquat from {user}", 3)
        await add_memory(db, user, "k", "kumquat")
        await SearchIndex(db).index_pending()
        rows = await db.fetchall(
            "SELECT DISTINCT owner FROM search_index WHERE owner = ?", (user_token(user),)
        )
        assert len(rows) == 1
    # Each of the three similar ids sees exactly its own message and memory.
    for user in ("tui:Zoë 🚀", "tui:Zoë 🚀e"):
        hits = await SearchIndex(db).search(user, ["kumquat"])
        assert len(hits) == 2 and any(h.text == f"kumquat from {user}" for h in hits)


async def test_messages_already_in_the_window_are_excluded(db: Database) -> None:
    index = SearchIndex(db)
    repo = MessageRepo(db)
    current = await new_session(db, ALICE)
    for n in range(1, 6):
        await repo.append(current, "user", f"lighthouse note {n}", 3)
    older = await new_session(db, ALICE)
    await repo.append(older, "user", "lighthouse in the old session", 3)
    await add_memory(db, ALICE, "place", "the lighthouse at Cape Point")

    hits = await index.search(ALICE, ["lighthouse"], session_id=current, before_seq=3)
    seen = {(h.kind, h.session_id, h.seq_order) for h in hits}
    assert seen == {
        ("message", current, 1),
        ("message", current, 2),
        ("message", older, 1),
        ("memory", None, None),
    }
    hits = await index.search(
        ALICE, ["lighthouse"], session_id=current, before_seq=3, include_memories=False
    )
    assert all(h.kind == "message" for h in hits) and len(hits) == 3
    # Without before_seq nothing is excluded.
    assert len(await index.search(ALICE, ["lighthouse"], session_id=current)) == 7


async def test_forked_copies_are_returned_once(db: Database) -> None:
    sid = await new_session(db, ALICE)
    await MessageRepo(db).append(sid, "user", "the quokka smiled", 3)
    await SessionRepo(db).create("test", "chat", ALICE, parent_session_id=sid)
    assert len(await SearchIndex(db).search(ALICE, ["quokka"])) == 1


async def test_better_match_ranks_first_and_limit_applies(db: Database) -> None:
    sid = await new_session(db, ALICE)
    repo = MessageRepo(db)
    await repo.append(sid, "user", "I had toast this morning and then went to work", 9)
    await repo.append(sid, "user", "Orange marmalade on toast is the best marmalade", 9)
    await repo.append(sid, "user", "nothing relevant here at all", 9)
    await repo.append(sid, "user", "the weather was grey, grey, grey", 9)
    hits = await SearchIndex(db).search(ALICE, ["marmalade", "toast"])
    assert [h.text for h in hits] == [
        "Orange marmalade on toast is the best marmalade",
        "I had toast this morning and then went to work",
    ]
    assert hits[0].score > hits[1].score
    assert len(await SearchIndex(db).search(ALICE, ["marmalade", "toast"], limit=1)) == 1


async def test_empty_terms_and_zero_limit_return_nothing(db: Database) -> None:
    sid = await new_session(db, ALICE)
    await MessageRepo(db).append(sid, "user", "anything", 1)
    index = SearchIndex(db)
    assert await index.search(ALICE, []) == []
    assert await index.search(ALICE, ["", ""]) == []
    assert await index.search(ALICE, ["anything"], limit=0) == []


HOSTILE = [
    'NEAR( OR "',
    "col:x",
    "owner:anything",
    "body:* OR *",
    '"unterminated',
    "a AND OR NOT b",
    "^start (((",
    "{owner body}: x",
    "zero\x00byte",
    "NEAR(a b, 2)",
    "emoji 🚀🚀 and नमस्ते",
    "'; DROP TABLE messages; --",
    "*",
    "-",
    "+",
]


@pytest.mark.parametrize("text", HOSTILE)
async def test_hostile_query_text_never_raises(db: Database, text: str) -> None:
    sid = await new_session(db, ALICE)
    await MessageRepo(db).append(sid, "user", "near the col with a body of x", 5)
    index = SearchIndex(db)
    await index.search(ALICE, extract_terms(text))
    await index.search(ALICE, [text])  # raw, as a caller bypassing extract_terms would
    await index.search(ALICE, text.split())
    assert await index_rows(db) == 1


async def test_hostile_terms_are_searched_literally(db: Database) -> None:
    sid = await new_session(db, ALICE)
    await MessageRepo(db).append(sid, "user", "turn left near or after the bridge", 5)
    await MessageRepo(db).append(sid, "user", "नमस्ते दुनिया", 5)
    index = SearchIndex(db)
    # A raw term is one literal phrase: the operators are just the words "near or".
    assert len(await index.search(ALICE, ['NEAR( OR "'])) == 1
    assert await index.search(ALICE, ['"left" OR "bridge"']) == []
    assert len(await index.search(ALICE, extract_terms('NEAR( OR "'))) == 1
    assert len(await index.search(ALICE, extract_terms("नमस्ते!"))) == 1


async def test_backfill_indexes_rows_from_before_the_migration(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "c.db", migrate=False)
    try:
        await apply_migrations(db, MIGRATIONS[:1])
        sid = await old_session(db, ALICE)
        await old_message(db, sid, "user", "the old armadillo story")
        await old_message(db, sid, "tool", "armadillo tool output")
        other = await old_session(db, BOB)
        await old_message(db, other, "user", "bob's armadillo")
        await add_memory(db, ALICE, "pet", "armadillo named Dillo")

        assert "m002_search_index" in await apply_migrations(db)
        hits = await SearchIndex(db).search(ALICE, ["armadillo"])
        assert sorted((h.kind, h.text) for h in hits) == [
            ("memory", "pet: armadillo named Dillo"),
            ("message", "the old armadillo story"),
        ]
        assert await index_rows(db) == 3
        await integrity_check(db)
    finally:
        await db.close()


async def test_m005_rebuilds_an_m002_index_with_per_user_terms(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "c.db", migrate=False)
    try:
        assert await apply_migrations(db, MIGRATIONS[:4])
        sid = await old_session(db, ALICE)
        await old_message(db, sid, "user", "the old armadillo story")
        await add_memory(db, ALICE, "pet", "armadillo named Dillo")
        other = await old_session(db, BOB)
        await old_message(db, other, "user", "bob's armadillo")
        # The m002 index holds the bare word, shared by every user.
        bare = await db.fetchone(
            "SELECT COUNT(*) FROM search_index WHERE search_index MATCH 'body:armadillo'"
        )
        assert bare is not None and bare[0] == 3

        assert await apply_migrations(db, MIGRATIONS[:5]) == ["m005_user_terms"]
        for query in ("body:armadillo", "armadillo"):
            gone = await db.fetchone(
                "SELECT COUNT(*) FROM search_index WHERE search_index MATCH ?", (query,)
            )
            assert gone is not None and gone[0] == 0
        for user, term in ((ALICE, "armadillo"), (BOB, "armadillo")):
            prefixed = await db.fetchone(
                "SELECT COUNT(*) FROM search_index WHERE search_index MATCH ?",
                (f"body:{term_prefix(user)}{term}",),
            )
            assert prefixed is not None and prefixed[0] == (2 if user == ALICE else 1)
        query = SearchQuery(ALICE, ["armadillos"])  # Porter still folds
        hits = await db.read(lambda conn: search_records(conn, query))
        assert sorted(h.text for h in hits) == [
            "pet: armadillo named Dillo",
            "the old armadillo story",
        ]
        await integrity_check(db)
    finally:
        await db.close()


@pytest.mark.sqlite_only
async def test_query_plan_ranks_in_the_fts_index_and_joins_only_the_hits(db: Database) -> None:
    sql, params = search_sql(
        SearchQuery(
            ALICE,
            ["pizza", "pasta"],
            limit=10,
            session_id="s",
            before_seq=5,
            include_memories=False,
        )
    )
    plan = [str(row[3]) for row in await db.fetchall("EXPLAIN QUERY PLAN " + sql, params)]
    # M = the MATCH constraint is handed to FTS5; the source tables are only looked up
    # by primary key for the limited hits, never scanned.
    assert any(p.startswith("SCAN search_index VIRTUAL TABLE INDEX") and ":M" in p for p in plan)
    assert "SEARCH m USING INTEGER PRIMARY KEY (rowid=?) LEFT-JOIN" in plan
    assert not any(p.startswith(("SCAN m", "SCAN u", "SCAN messages")) for p in plan), plan


@pytest.mark.sqlite_only
async def test_optimize_drops_deleted_text_from_the_index_segments(db: Database) -> None:
    sid = await new_session(db, ALICE)
    repo = MessageRepo(db)
    secret = await repo.append(sid, "user", "qxzanzibarq is my secret", 5)
    await repo.append(sid, "user", "an unrelated keeper message", 5)
    await SearchIndex(db).index_pending()
    await db.execute_write("DELETE FROM messages WHERE id = ?", (secret.id,))

    async def segments_mention_secret() -> bool:
        rows = await db.fetchall("SELECT block FROM search_index_data")
        return any(b"qxzanzibarq" in bytes(r[0]) for r in rows if r[0] is not None)

    # A plain FTS5 delete only appends a delete marker (repeating the tokens).
    assert await segments_mention_secret()
    await SearchIndex(db).optimize()
    assert not await segments_mention_secret()
    assert await SearchIndex(db).search(ALICE, ["keeper"])
    await integrity_check(db)


async def test_a_session_moved_to_another_user_moves_its_entries(db: Database) -> None:
    sid = await new_session(db, ALICE)
    await MessageRepo(db).append(sid, "user", "the narwhal tusk", 3)
    await SearchIndex(db).index_pending()
    await MessageRepo(db).append(sid, "user", "a queued narwhal song", 3)
    await db.execute_write("UPDATE sessions SET user_id = ? WHERE id = ?", (BOB, sid))
    # Both the indexed message and the one still queued follow the session.
    assert await SearchIndex(db).search(ALICE, ["narwhal"]) == []
    assert len(await SearchIndex(db).search(BOB, ["narwhal"])) == 2


def _users_sharing_a_prefix() -> tuple[str, str]:
    """Two user ids whose six-hex-digit term prefixes collide (found by brute force)."""
    seen: dict[str, str] = {}
    for i in range(1_000_000):
        user = f"ws:user{i}"
        prefix = term_prefix(user)
        if prefix in seen:
            return seen[prefix], user
        seen[prefix] = user
    raise AssertionError("no collision in a million ids")


async def test_users_whose_term_prefixes_collide_still_see_only_their_own_rows(
    db: Database,
) -> None:
    first, second = _users_sharing_a_prefix()
    assert term_prefix(first) == term_prefix(second) and first != second
    for user in (first, second):
        sid = await new_session(db, user)
        await MessageRepo(db).append(sid, "user", f"the okapi belongs to {user}", 5)
        await add_memory(db, user, "animal", f"okapi of {user}")
    # Both users' rows share doclists; the owner token still keeps them apart.
    for user, other in ((first, second), (second, first)):
        hits = await SearchIndex(db).search(user, ["okapi"])
        assert len(hits) == 2
        assert all(h.text.endswith(user) and not h.text.endswith(other) for h in hits)


async def test_a_moved_session_is_searchable_with_the_new_owners_terms(db: Database) -> None:
    sid = await new_session(db, ALICE)
    await MessageRepo(db).append(sid, "user", "the narwhal tusk", 3)
    await db.execute_write("UPDATE sessions SET user_id = ? WHERE id = ?", (BOB, sid))
    if db.engine.name == "sqlite":
        rows = await db.fetchone(
            "SELECT COUNT(*) FROM search_index WHERE search_index MATCH ?",
            (f"body:{term_prefix(ALICE)}narwhal",),
        )
    else:
        await SearchIndex(db).index_pending()
        rows = await db.fetchone(
            "SELECT COUNT(*) FROM search_terms WHERE owner = ?", (user_token(ALICE),)
        )
    assert rows is not None and rows[0] == 0
    await integrity_check(db)


async def test_stemming_is_the_same_for_every_user(db: Database) -> None:
    # "feed" keeps its stem unprefixed (no vowel-consonant sequence before "eed"); a
    # prefix with letters in it could add one and make "feed" match "fee" for some users.
    users = [f"ws:stem{i}" for i in range(40)]
    for user in users:
        sid = await new_session(db, user)
        await MessageRepo(db).append(sid, "user", "the fee was paid", 4)
    for user in users:
        assert await SearchIndex(db).search(user, ["feed"]) == [], term_prefix(user)
        assert len(await SearchIndex(db).search(user, ["fees"])) == 1
