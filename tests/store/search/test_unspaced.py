"""Scripts written without spaces: any part of a run can be found."""

from __future__ import annotations

from pathlib import Path

import pytest

from picobot.recall.keywords import extract_terms
from picobot.store.conversation.messages import MessageRepo
from picobot.store.db import Database
from picobot.store.migrations import MIGRATIONS, apply_migrations
from picobot.store.retrieval.search import SearchIndex
from picobot.store.retrieval.terms import has_content, term_prefix, words
from tests.store.search.test_search import (
    ALICE,
    add_memory,
    integrity_check,
    new_session,
    old_message,
    old_session,
)


def test_each_character_of_an_unspaced_script_is_a_word() -> None:
    assert words("我们用Python写了API") == ["我", "们", "用", "Python", "写", "了", "API"]
    assert words("สวัสดีครับ")[:2] == ["ส", "ว"]
    assert words("plain ascii text") == ["plain", "ascii", "text"]


def test_terms_are_neighbouring_pairs() -> None:
    assert extract_terms("去爬山", 8) == ["去爬", "爬山"]
    assert has_content("好") and not has_content("ok")


@pytest.mark.parametrize(
    ("stored", "query", "found"),
    [
        ("我昨天和朋友们去爬山了", "朋友", True),
        ("我昨天和朋友们去爬山了", "爬山", True),
        ("我昨天和朋友们去爬山了", "朋山", False),  # not neighbours: no phrase match
        ("昨日は友達と山に登りました", "友達", True),
        ("어제 친구들과 산에 갔어요", "친구", True),
    ],
)
async def test_part_of_a_run_is_found(tmp_path: Path, stored: str, query: str, found: bool) -> None:
    db = await Database.open(tmp_path / "c.db")
    try:
        sid = await new_session(db, ALICE)
        await MessageRepo(db).append(sid, "user", stored, 10)
        hits = await SearchIndex(db).search(ALICE, extract_terms(query, 8))
        assert [h.text for h in hits] == ([stored] if found else [])
    finally:
        await db.close()


async def test_the_migration_indexes_old_runs_again(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "c.db", migrate=False)
    before = MIGRATIONS.index(
        next(m for m in MIGRATIONS if m.__name__ == "m011_split_unspaced_scripts")
    )
    try:
        await apply_migrations(db, MIGRATIONS[:before])
        sid = await old_session(db, ALICE)
        message_id = await old_message(db, sid, "user", "我们去爬山了")
        await SearchIndex(db).index_pending(None)
        await add_memory(db, ALICE, "hobby", "周末爬山")
        prefix = term_prefix(ALICE)
        # As the index held them before: each run one word.
        async with db.transaction() as conn:
            await conn.execute(
                "UPDATE search_index SET body = ? WHERE rowid = ?",
                (f"{prefix}我们去爬山了", message_id),
            )
        assert not await SearchIndex(db).search(ALICE, ["爬山"], include_memories=False)

        # Later migrations may follow it; it runs first.
        assert (await apply_migrations(db))[0] == "m011_split_unspaced_scripts"
        hits = await SearchIndex(db).search(ALICE, ["爬山"])
        assert sorted(h.text for h in hits) == ["hobby: 周末爬山", "我们去爬山了"]
        await integrity_check(db)
    finally:
        await db.close()
