"""``--learn`` end to end on the synthetic set, with scripted extractors (test fixtures).

Real ``picobot serve`` and ``picobot facts extract`` processes, real SQLite, real
HTTP; only the extraction model is scripted. The figures must move with the facts:
a fixture that extracts the quoted turns covers the planted answers and brings an
unfindable turn into the prompt; one that extracts nothing covers nothing and
changes nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bench.recall import synthetic
from bench.recall.cli import EvalConfig, evaluate, parse_args
from bench.recall.extractor import Extractor, LearnModel
from bench.recall.standin import StandIn

SESSIONS = 4


def _run(tmp: Path, kind: str) -> tuple[dict[str, Any], Path]:
    data = synthetic.write(tmp / "synthetic.json", 1)
    out = tmp / kind
    cfg = EvalConfig(file=data, out_dir=out, learn=LearnModel(kind))
    return evaluate(cfg, progress=lambda _line: None), out


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    return _run(tmp_path_factory.mktemp("learn"), "scripted")


@pytest.fixture(scope="module")
def empty(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    return _run(tmp_path_factory.mktemp("learn"), "empty")


def _question(doc: dict[str, Any], kind: str, mode: str, facts: bool) -> dict[str, Any]:
    index = synthetic.KINDS.index(kind)
    rows = [
        r
        for r in doc["questions"]
        if r["qa_index"] == index and r["mode"] == mode and r["facts"] == facts
    ]
    assert len(rows) == 1
    return rows[0]


def test_extraction_is_counted_per_conversation_and_overall(
    scripted: tuple[dict[str, Any], Path],
) -> None:
    doc, _ = scripted
    learned = doc["learning"]
    row = learned["by_conversation"]["syn-1"]
    assert row["sessions"] == SESSIONS
    assert row["extraction_calls"] == SESSIONS  # one small session, one call
    assert row["json_answers"] == SESSIONS and row["failed_calls"] == 0
    assert 0 < row["facts_active"] <= row["facts_stored"]
    for key in ("extraction_calls", "json_answers", "facts_stored", "facts_active"):
        assert learned["overall"][key] == row[key]
    assert doc["conversations"][0]["learning"]["facts_active"] == row["facts_active"]
    assert doc["run"]["learn_model"]["fixture"] is True
    # Extraction went to the extraction route only; chat calls are turns and questions.
    turns = doc["conversations"][0]["turns"]
    assert doc["run"]["model_calls"]["chat"] == turns + len(doc["questions"])
    # fresh, continue and kept, without and with facts (session would write into the
    # conversation that facts are learned from: left out).
    assert len(doc["questions"]) == 3 * 2 * 6
    assert doc["run"]["modes"] == ["fresh", "continue", "kept"]


def test_answers_in_the_facts_are_covered_and_the_others_are_not(
    scripted: tuple[dict[str, Any], Path],
) -> None:
    doc, _ = scripted
    for kind in ("rare", "multihop", "window", "unfindable"):
        assert _question(doc, kind, "fresh", False)["answer_covered_by_fact"] is True
    # "the day before" is not in any turn; adversarial questions are not judged.
    assert _question(doc, "temporal", "fresh", False)["answer_covered_by_fact"] is False
    assert _question(doc, "adversarial", "fresh", False)["answer_covered_by_fact"] is None
    coverage = doc["learning"]["overall"]["answer_coverage"]
    assert (coverage["hits"], coverage["n"]) == (4, 5)
    assert doc["learning"]["answer_coverage_by_category"]["2 temporal"]["recall"] == 0.0


def test_facts_in_the_prompt_change_recall_in_the_same_run(
    scripted: tuple[dict[str, Any], Path],
) -> None:
    doc, out = scripted
    for mode in ("fresh", "continue"):
        off = _question(doc, "unfindable", mode, False)
        on = _question(doc, "unfindable", mode, True)
        assert not off["hit"] and not off["answer_in_prompt"]
        assert on["hit"] and set(on["found"].values()) == {"facts"}
        assert on["answer_in_prompt"]
        effect = doc["learning"]["effect"][mode]["overall"]
        assert effect["evidence_recall_change_points"] > 0
        assert effect["questions_gained"] >= 1 and effect["questions_lost"] == 0
        assert effect["answer_in_prompt_on"]["hits"] > effect["answer_in_prompt_off"]["hits"]
        assert doc["systems"][f"picobot ({mode} + facts)"]["overall"]["n"] == 6
        assert doc["modes"][f"{mode} + facts"]["purge_residue"] == 0
        assert doc["modes"][f"{mode} + facts"]["evidence_turns"]["in_facts"] > 0
    md = (out / "recall.md").read_text(encoding="utf-8")
    assert "## Learned facts" in md and "test fixture" in md
    assert "| syn-1 | 4 | 4 | 4 | 0 |" in md


def test_no_facts_no_coverage_and_no_change(empty: tuple[dict[str, Any], Path]) -> None:
    doc, _ = empty
    learned = doc["learning"]
    assert learned["overall"]["extraction_calls"] == SESSIONS
    assert learned["overall"]["json_answers"] == SESSIONS  # "[]" is valid JSON
    assert learned["overall"]["facts_stored"] == 0
    assert learned["overall"]["answer_coverage"]["hits"] == 0
    assert learned["overall"]["answer_coverage"]["n"] == 5
    for mode in ("fresh", "continue"):
        effect = learned["effect"][mode]["overall"]
        assert effect["evidence_recall_change_points"] == 0
        assert effect["evidence_recall_on"] == effect["evidence_recall_off"]
        assert effect["answer_in_prompt_on"] == effect["answer_in_prompt_off"]
        assert doc["modes"][f"{mode} + facts"]["evidence_turns"]["in_facts"] == 0


def test_a_run_without_learn_has_no_learning_part(tmp_path: Path) -> None:
    data = synthetic.write(tmp_path / "synthetic.json", 1)
    doc = evaluate(
        EvalConfig(file=data, out_dir=None, modes=("fresh",)), progress=lambda _line: None
    )
    assert "learning" not in doc and "learn_model" not in doc["run"]
    assert set(doc["modes"]) == {"fresh"}
    assert all(not r["facts"] and "answer_covered_by_fact" not in r for r in doc["questions"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--learn"], "needs a real model"),
        (["--learn-local"], "need --learn"),
        (["--learn", "--learn-local", "--learn-model", "http://h/v1"], "not both"),
        (["--learn", "--learn-model", "localhost:8080"], "base URL"),
        (["--learn", "--learn-local", "--learn-model-name", "x"], "go with --learn-model"),
        (["--learn", "--learn-model", "http://h/v1", "--learn-model-key-env", "NOPE_X"], "not set"),
    ],
)
def test_learn_without_a_real_model_is_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_learn_options_name_the_model() -> None:
    assert parse_args(["--learn", "--learn-local"]).learn == LearnModel("local")
    remote = parse_args(["--learn", "--learn-model", "http://h:8080/v1", "--learn-model-name", "q"])
    assert remote.learn == LearnModel("remote", "http://h:8080/v1", "q")
    assert parse_args([]).learn is None


async def test_a_named_server_extracts_through_the_forwarding_route(tmp_path: Path) -> None:
    # The "real" server is a stand-in on loopback whose extraction route is scripted:
    # the whole --learn-model path runs (PicoBot -> /learn -> that server and back).
    data = synthetic.write(tmp_path / "synthetic.json", 1)
    async with StandIn(Extractor(LearnModel("scripted"))) as upstream:
        url = upstream.learn_url("up")
        cfg = EvalConfig(
            file=data, out_dir=None, modes=("fresh",), learn=LearnModel("remote", url, "m")
        )
        doc = await asyncio.to_thread(evaluate, cfg, lambda _line: None)
        assert upstream.extractor is not None
        assert upstream.extractor.counts["up"]["calls"] == SESSIONS
    row = doc["learning"]["by_conversation"]["syn-1"]
    assert (row["extraction_calls"], row["json_answers"]) == (SESSIONS, SESSIONS)
    assert row["facts_active"] > 0 and row["answer_coverage"]["hits"] == 4
    assert doc["run"]["learn_model"] == {
        "kind": "remote",
        "base_url": url,
        "name": "m",
        "key_env": "",
        "describe": f"m at {url}",
        "fixture": False,
    }
