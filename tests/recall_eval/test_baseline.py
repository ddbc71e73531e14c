"""The BM25 and window baselines on the synthetic set."""

from __future__ import annotations

from bench.recall import baseline, dataset, synthetic


def _conv(**kwargs: int) -> dataset.Conversation:
    return dataset.parse([synthetic.conversation(0, **kwargs)])[0]


def test_bm25_ranks_the_rare_word_first_and_fills_to_the_budget() -> None:
    conv = _conv()
    index = baseline.Bm25(conv)
    try:
        assert index.ranked("Tell me about the axolotl")[0] == "D1:2"
        assert index.ranked("!!!") == []
        turns = conv.turns()
        small = index.fill("What did they do this weekend or downtown?", 60)
        assert small and sum(baseline.line_cost(turns[d].message()) for d in small) <= 60
        assert len(index.fill("What did they do this weekend or downtown?", 4000)) > len(small)
        assert "D1:2" not in index.fill("axolotl", 800, exclude=["D1:2"])
    finally:
        index.close()


def test_the_window_holds_the_last_turns_of_the_last_session() -> None:
    conv = _conv(sessions=4, turns=8)
    assert baseline.window_turns(conv, 20) == [f"D4:{t}" for t in range(1, 9)]
    assert baseline.window_turns(conv, 6) == ["D4:6", "D4:7", "D4:8"]
    assert baseline.window_turns(conv, 1) == []
    recent = baseline.recent_turns(conv, 150)
    assert recent[0] == "D4:8" and "D1:1" not in recent


def test_hits_per_baseline() -> None:
    conv = _conv()
    flags = baseline.hits(
        conv, (800, 4000), recall_budget=800, context_budget=4000, window_messages=20
    )
    rare = synthetic.KINDS.index("rare")
    window = synthetic.KINDS.index("window")
    unfindable = synthetic.KINDS.index("unfindable")
    assert flags["bm25@800"][rare] and not flags["window (continue)"][rare]
    assert flags["window (continue)"][window]
    assert not any(f[unfindable] for name, f in flags.items() if "bm25" in name)
