"""Loading LoCoMo-format files: what is accepted, what is refused and how it says so."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bench.recall import dataset, synthetic


def _data() -> list[dict[str, Any]]:
    return synthetic.generate(2)


def _error(data: Any) -> str:
    with pytest.raises(dataset.LocomoError) as caught:
        dataset.parse(data, "f.json")
    return str(caught.value)


def test_a_synthetic_file_loads_in_session_order() -> None:
    convs = dataset.parse(_data())
    assert [c.sample_id for c in convs] == ["syn-1", "syn-2"]
    conv = convs[0]
    assert [s.number for s in conv.sessions] == [1, 2, 3, 4]  # the dated empty 5 is skipped
    assert conv.turn_count == 32
    assert conv.sessions[0].date_time
    multihop = conv.questions[synthetic.KINDS.index("multihop")]
    assert multihop.evidence == ("D1:4", "D3:4")  # "D1:4; D3:4" split
    assert conv.skipped == {"no_evidence": [6], "unresolved_evidence": [7]}
    assert len(conv.questions) == 6


def test_a_turn_renders_with_its_speaker_and_photo() -> None:
    turn = dataset.Turn("D1:1", "Ann", "Look!", "a red kite")
    assert turn.message() == "Ann: Look! [shares a photo: a red kite]"
    assert dataset.Turn("D1:2", "Bo", "Hi").message() == "Bo: Hi"


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d[0].pop("conversation"), "conversation 1 (syn-1): missing 'conversation'"),
        (
            lambda d: d[1]["conversation"]["session_2"][3].update(text=7),
            "conversation 2 (syn-2): session_2[3].text: expected a string, found int",
        ),
        (
            lambda d: d[0]["conversation"]["session_1"][0].pop("dia_id"),
            "session_1[0]: missing 'dia_id'",
        ),
        (lambda d: d[0]["qa"][2].update(category="2"), "qa[2].category: expected an integer"),
        (lambda d: d[0]["qa"].__setitem__(0, []), "qa[0]: expected an object, found list"),
        (lambda d: d[1].update(sample_id="syn-1"), "sample_id used twice"),
        (
            lambda d: d[0]["conversation"]["session_2"][0].update(dia_id="D1:1"),
            "dia_id 'D1:1' appears in session_1 and session_2",
        ),
        (lambda d: d[0]["conversation"].pop("speaker_b"), "conversation.speaker_b: expected"),
    ],
)
def test_a_malformed_file_is_refused_saying_where(mutate: Any, expected: str) -> None:
    data = _data()
    mutate(data)
    message = _error(data)
    assert message.startswith("f.json: ")
    assert expected in message


def test_the_top_level_must_be_a_non_empty_list() -> None:
    assert "expected a JSON list of conversations, found dict" in _error({"qa": []})
    assert "the list of conversations is empty" in _error([])


def test_load_names_the_file_and_the_json_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[{", encoding="utf-8")
    with pytest.raises(dataset.LocomoError, match=r"bad\.json: not JSON"):
        dataset.load(bad)
    with pytest.raises(dataset.LocomoError, match="no such file"):
        dataset.load(tmp_path / "missing.json")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_data()), encoding="utf-8")
    assert len(dataset.load(good)) == 2


def test_select_samples_the_same_questions_every_time() -> None:
    data = _data()
    extra = copy.deepcopy(data[0]["qa"][0])
    data[0]["qa"] += [dict(extra, question=f"q{i}") for i in range(30)]
    convs = dataset.parse(data)
    first = dataset.select(convs, max_conversations=1, max_questions=5, seed=3)
    again = dataset.select(convs, max_conversations=1, max_questions=5, seed=3)
    assert len(first) == 1 and len(first[0].questions) == 5
    assert [q.index for q in first[0].questions] == [q.index for q in again[0].questions]
    indexes = [q.index for q in first[0].questions]
    assert indexes == sorted(indexes)
    other = dataset.select(convs, max_conversations=1, max_questions=5, seed=4)
    assert [q.index for q in other[0].questions] != indexes
    assert dataset.select(convs, max_questions=100) == convs
