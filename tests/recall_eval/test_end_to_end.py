"""``python -m bench.recall`` end to end on the synthetic set: real servers, real prompts.

Each planted case must come out the way it was built: found where keyword search
can find it, in the window where only the window holds it, missed where nothing can
find it, and nothing left behind by the purges (which the residue check shows it
would catch, with the purges off).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.recall import synthetic
from bench.recall.cli import EvalConfig, evaluate, main

CONVERSATIONS = 2


def _kind(row: dict[str, Any]) -> str:
    return synthetic.KINDS[row["qa_index"]]


def _rows(doc: dict[str, Any], kind: str, mode: str) -> list[dict[str, Any]]:
    rows = [r for r in doc["questions"] if r["mode"] == mode and _kind(r) == kind]
    assert len(rows) == CONVERSATIONS, (kind, mode)
    return rows


def _baseline(doc: dict[str, Any], kind: str, name: str) -> list[bool]:
    return [r[name] for r in doc["baseline_questions"] if _kind(r) == kind]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    tmp = tmp_path_factory.mktemp("recall")
    data = synthetic.write(tmp / "synthetic.json", CONVERSATIONS)
    out = tmp / "out"
    doc = evaluate(EvalConfig(file=data, out_dir=out), progress=lambda _line: None)
    return doc, out


def test_the_results_hold_every_figure(run: tuple[dict[str, Any], Path]) -> None:
    doc, out = run
    on_disk = json.loads((out / "recall.json").read_text(encoding="utf-8"))
    assert on_disk["systems"] == doc["systems"]
    assert {"picobot (fresh)", "picobot (continue)", "bm25@800", "bm25@4000"} <= set(doc["systems"])
    assert {"window (continue)", "recent@4000", "bm25+neighbours@4000"} <= set(doc["systems"])
    assert {"picobot (kept)", "picobot (session)"} <= set(doc["systems"])
    for entry in doc["systems"].values():
        assert set(entry) == {"overall", "answerable", "split", "by_category", "by_conversation"}
        assert entry["overall"]["n"] == 6 * CONVERSATIONS
        assert set(entry["by_conversation"]) == {"syn-1", "syn-2"}
        assert "1 multi-hop" in entry["by_category"]
    assert doc["run"]["skipped"] == {"no_evidence": CONVERSATIONS, "unresolved_evidence": 2}
    assert doc["run"]["split"] == {"tune": ["syn-1"], "check": ["syn-2"]}
    for mode in ("fresh", "continue", "kept", "session"):
        details = doc["modes"][mode]
        assert details["prompt_tokens"]["median"] > 0
        assert details["recalled_block_tokens"]["p95"] > 0
        assert details["evidence_turns"]["n"] == 7 * CONVERSATIONS
    md = (out / "recall.md").read_text(encoding="utf-8")
    assert "| picobot (fresh) |" in md and "| bm25@800 |" in md


def test_the_stand_in_answered_and_recorded_every_turn_and_question(
    run: tuple[dict[str, Any], Path],
) -> None:
    doc, _ = run
    turns = sum(c["turns"] for c in doc["conversations"])
    asked = len(doc["questions"])
    assert asked == 4 * 6 * CONVERSATIONS
    assert doc["run"]["model_calls"]["chat"] == turns + asked
    assert doc["run"]["model_calls"]["rejected"] == 0
    assert all(r["prompt_tokens"] > 0 for r in doc["questions"])
    assert [c["turns_stored_changed"] for c in doc["conversations"]] == [0] * CONVERSATIONS


def test_a_rare_planted_fact_is_found_by_bm25_and_by_recall(
    run: tuple[dict[str, Any], Path],
) -> None:
    doc, _ = run
    assert _baseline(doc, "rare", "bm25@800") == [True] * CONVERSATIONS
    for row in _rows(doc, "rare", "fresh"):
        assert row["hit"]
        assert set(row["found"].values()) == {"recalled"}
    for row in _rows(doc, "multihop", "fresh"):
        assert row["hit"] and len(row["found"]) == 2


def test_the_last_turn_is_in_the_window_of_a_continuation(
    run: tuple[dict[str, Any], Path],
) -> None:
    doc, _ = run
    assert _baseline(doc, "window", "window (continue)") == [True] * CONVERSATIONS
    assert _baseline(doc, "rare", "window (continue)") == [False] * CONVERSATIONS
    for row in _rows(doc, "window", "continue"):
        assert row["hit"]
        assert set(row["found"].values()) == {"window"}


def test_one_session_asks_on_in_the_last_session_without_purging(
    run: tuple[dict[str, Any], Path],
) -> None:
    doc, _ = run
    for row in _rows(doc, "window", "session"):
        assert row["hit"] and row["residue"] is None
    rows = [r for r in doc["questions"] if r["mode"] == "session"]
    # Every question but each conversation's first continues the previous prompt.
    assert sum(r["prefix_share"] is None for r in rows) == CONVERSATIONS
    assert all(0 < r["prefix_share"] <= 1 for r in rows if r["prefix_share"] is not None)
    assert doc["modes"]["session"]["prefix_share"]["n"] == len(rows) - CONVERSATIONS
    assert doc["modes"]["session"]["purge_residue"] is None
    assert doc["modes"]["kept"]["purge_residue"] is None


def test_a_question_nothing_can_find_counts_as_a_miss(run: tuple[dict[str, Any], Path]) -> None:
    doc, _ = run
    for mode in ("fresh", "continue"):
        for row in _rows(doc, "unfindable", mode):
            assert not row["hit"]
            assert set(row["found"].values()) == {None}
    assert _baseline(doc, "unfindable", "bm25@4000") == [False] * CONVERSATIONS
    overall = doc["systems"]["picobot (fresh)"]["overall"]
    assert overall["hits"] < overall["n"]


def test_purged_questions_leave_nothing_in_later_prompts(
    run: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    doc, _ = run
    assert doc["modes"]["fresh"]["purge_residue"] == 0
    assert doc["modes"]["continue"]["purge_residue"] == 0
    # Without the purges the same check finds the earlier questions.
    data = synthetic.write(tmp_path / "one.json", 1)
    kept = evaluate(
        EvalConfig(file=data, out_dir=None, modes=("fresh",), purge=False),
        progress=lambda _line: None,
    )
    assert kept["modes"]["fresh"]["purge_residue"] > 0


def test_a_missing_or_broken_file_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--file", str(tmp_path / "nope.json"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no LoCoMo file at" in err
    # It says where the data comes from, not only that it is missing.
    assert "snap-research/locomo" in err and "Maharana et al." in err
    bad = tmp_path / "bad.json"
    bad.write_text('[{"conversation": {"speaker_a": "A", "speaker_b": "B"}, "qa": []}]')
    assert main(["--file", str(bad), "--out", str(tmp_path)]) == 2
    assert "no session_N with turns" in capsys.readouterr().err
    assert not (tmp_path / "recall.json").exists()
