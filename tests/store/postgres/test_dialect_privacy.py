"""Dialect rules the purges, retention and export need: a negative ``LIMIT`` parameter."""

from __future__ import annotations

from picobot.store.db import Database
from picobot.store.postgres.dialect import translate
from tests.privacy.test_purge_store import add_session


def test_a_limit_parameter_is_marked_to_send_a_negative_as_no_limit() -> None:
    st = translate("SELECT a FROM t ORDER BY a LIMIT ? OFFSET ?")
    assert st.sql == "SELECT a FROM t ORDER BY a LIMIT $1 OFFSET $2"
    assert st.limits == frozenset({0})
    assert translate("SELECT a FROM t LIMIT ?2").limits == frozenset({1})


async def test_a_negative_limit_returns_every_row_on_either_engine(db: Database) -> None:
    for i in range(3):
        await add_session(db, "test:u", f"s{i}")
    sql = "SELECT id FROM sessions ORDER BY id LIMIT ?"
    assert [r[0] for r in await db.fetchall(sql, (-1,))] == ["s0", "s1", "s2"]
    assert [r[0] for r in await db.fetchall(sql, (-5,))] == ["s0", "s1", "s2"]
    assert [r[0] for r in await db.fetchall(sql, (2,))] == ["s0", "s1"]
    assert await db.fetchall(sql, (0,)) == []
