"""Record kinds in the recall index are told apart by rowid alone."""

from __future__ import annotations

import sqlite3

import pytest

from picobot.store.migrations.facts import FACT_ROWID_BASE
from picobot.store.migrations.layers import DIGEST_ROWID_BASE, REFLECTION_ROWID_BASE
from picobot.store.retrieval.search_kinds import kind_of, rowid_filter


@pytest.mark.parametrize(
    ("rowid", "kind"),
    [
        (7, ("message", 7)),
        (-7, ("memory", 7)),
        (-(FACT_ROWID_BASE + 7), ("fact", 7)),
        (-(REFLECTION_ROWID_BASE + 7), ("reflection", 7)),
        (-(DIGEST_ROWID_BASE + 7), ("digest", 7)),
    ],
)
def test_each_kind_and_row_follow_from_the_rowid(rowid: int, kind: tuple[str, int]) -> None:
    assert kind_of(rowid) == kind


@pytest.mark.parametrize("memories", [False, True])
@pytest.mark.parametrize("facts", [False, True])
@pytest.mark.parametrize("layers", [False, True])
def test_the_filter_keeps_exactly_the_kinds_asked_for(
    memories: bool, facts: bool, layers: bool
) -> None:
    rows = [7, -7, -(FACT_ROWID_BASE + 7), -(REFLECTION_ROWID_BASE + 7), -(DIGEST_ROWID_BASE + 7)]
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    conn.executemany("INSERT INTO t VALUES (?)", [(r,) for r in rows])
    cond = rowid_filter(memories=memories, facts=facts, layers=layers) or "1"
    kept = {kind_of(r[0])[0] for r in conn.execute(f"SELECT rowid FROM t WHERE {cond}")}  # noqa: S608
    wanted = {"message"} | ({"memory"} if memories else set()) | ({"fact"} if facts else set())
    wanted |= {"reflection", "digest"} if layers else set()
    assert kept == wanted
