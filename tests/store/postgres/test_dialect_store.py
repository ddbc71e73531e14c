"""Dialect rules the store's statements need, checked on the rewrite and, through the
``db`` fixture, on whichever engine the tests run."""

from __future__ import annotations

import json

from picobot.store.db import Database
from picobot.store.postgres.dialect import translate


def test_a_subquery_in_from_gets_an_alias_unless_it_has_one() -> None:
    sql = translate(
        "SELECT (SELECT COUNT(*) FROM (SELECT id FROM facts WHERE user_id = ?)),"
        " (SELECT COUNT(*) FROM (SELECT id FROM facts) AS named),"
        " (SELECT COUNT(*) FROM (SELECT id FROM facts) bare)"
    ).sql
    assert sql == (
        "SELECT (SELECT COUNT(*) FROM (SELECT id FROM facts WHERE user_id = $1) AS _subquery1),"
        " (SELECT COUNT(*) FROM (SELECT id FROM facts) AS named),"
        " (SELECT COUNT(*) FROM (SELECT id FROM facts) bare)"
    )


def test_nested_subqueries_followed_by_a_keyword_get_distinct_aliases() -> None:
    sql = translate(
        "SELECT id FROM (SELECT * FROM (SELECT * FROM messages LIMIT 5)) WHERE id > 0"
    ).sql
    assert sql == (
        "SELECT id FROM (SELECT * FROM (SELECT * FROM messages LIMIT 5) AS _subquery2)"
        " AS _subquery1 WHERE id > 0"
    )


def test_limit_parameters_are_known_by_the_callers_position() -> None:
    statement = translate("SELECT id FROM facts WHERE user_id = ? LIMIT ? OFFSET ?")
    assert statement.sql == "SELECT id FROM facts WHERE user_id = $1 LIMIT $2 OFFSET $3"
    assert statement.limits == frozenset({1})


async def test_a_negative_limit_parameter_is_no_limit(db: Database) -> None:
    rows = await db.fetchall(
        "SELECT n FROM (SELECT 1 AS n UNION ALL SELECT 2 UNION ALL SELECT 3) ORDER BY n LIMIT ?",
        (-1,),
    )
    assert [r[0] for r in rows] == [1, 2, 3]
    rows = await db.fetchall(
        "SELECT n FROM (SELECT 1 AS n UNION ALL SELECT 2) ORDER BY n LIMIT ?", (1,)
    )
    assert [r[0] for r in rows] == [1]


def test_json_each_as_a_table_of_ids_is_an_unnested_list() -> None:
    statement = translate(
        "SELECT COUNT(*) FROM search_index WHERE rowid IN (SELECT -value FROM json_each(?))"
    )
    assert statement.sql == (
        "SELECT COUNT(*) FROM search_index WHERE rowid IN"
        " (SELECT -value FROM unnest(CAST($1 AS BIGINT[])) AS json_each(value))"
    )
    assert statement.lists == frozenset({0})


async def test_json_each_as_a_table_reads_each_id(db: Database) -> None:
    for ids in ("[3, 1, 2]", "[]"):
        rows = await db.fetchall("SELECT -value FROM json_each(?) ORDER BY value", (ids,))
        assert [r[0] for r in rows] == [-n for n in sorted(json.loads(ids))]
