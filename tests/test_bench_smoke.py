"""The bench machinery end to end on a tiny corpus (2,000 messages, a few iterations).

Only the shape of the results is checked: every bench reports, every ratio is a
positive number. Timings are never asserted; ``make bench`` is where they are measured.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("numpy")  # the corpus generator's one dependency beyond PicoBot's

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.cli import RunConfig, main, run, run_scaling  # noqa: E402
from bench.common import SMOKE  # noqa: E402
from bench.corpus import TINY  # noqa: E402

RATIOS = {
    "turn_overhead": ("p50_ratio", "p95_ratio"),
    "recall_search": ("p50_ratio", "p95_ratio"),
    "write": ("p50_ratio", "p99_ratio"),
    "websocket": (
        "capacity_ratio",
        "returning_capacity_ratio",
        "quiet_returning_capacity_ratio",
        "half_capacity_p95_ratio",
        "echo_capacity_ratio",
    ),
    "webhook": ("p50_ratio", "p95_ratio"),
    "chat_endpoint": ("p50_ratio", "p95_ratio", "whole_p95_ratio"),
    "purge": ("p99_ratio",),
    "learning_overhead": ("p50_ratio", "p95_ratio"),
    "vectors": ("recall_p95_ratio", "turn_p95_ratio"),
    "mcp_search": ("p50_ratio", "p95_ratio"),
    "cluster": ("capacity_ratio",),
}


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def test_bench_runs_on_a_tiny_corpus(tmp_path: Path) -> None:
    cfg = RunConfig(
        [TINY], SMOKE, cache_dir=tmp_path / "cache", out_dir=tmp_path / "out", chart=False
    )
    run(cfg, progress=lambda _line: None)

    data = json.loads((tmp_path / "out" / "latest.json").read_text(encoding="utf-8"))
    assert set(RATIOS) <= set(data)
    for name, keys in RATIOS.items():
        entry = data[name]
        assert isinstance(entry["pass"], bool), name
        assert TINY.name in entry["by_scale"], name
        for key in keys:
            assert _positive(entry[key]), (name, key, entry[key])
            assert _positive(entry["by_scale"][TINY.name][key]), (name, key)
    websocket = data["websocket"]
    for key in ("turns_per_s", "bare_sql_turns_per_s", "bare_sql_half_capacity_p95_ms"):
        assert _positive(websocket[key]), key
    assert websocket["error_frames"] == 0
    assert data["chat_endpoint"]["errors"] == 0
    assert data["cluster"]["error_frames"] == 0  # two instances on one file answer every turn
    for tail in ("bare", "quiet"):  # the servers' copies are removed
        assert not (tmp_path / "cache" / f"run-{TINY.name}-{tail}").exists()
    recall = data["recall_search"]
    assert recall["p95_1m_ms"] is None and "BENCH_SCALE=full" in recall["p95_1m_note"]
    assert isinstance(data["prompt_prefix"]["pass"], bool)
    assert 0 < data["prompt_prefix"]["median_share"] <= 1
    assert data["prompt_ttft"]["pass"] is None  # the tiny plan skips the local model
    assert report.missed(data) == [
        n for n in (*report.TARGETS, *report.RUN_TARGETS) if data[n]["pass"] is False
    ]
    assert _positive(data["purge"]["duration_s"])
    assert data["purge"]["by_scale"][TINY.name]["victim_messages"] > 0
    learning = data["learning_overhead"]["by_scale"][TINY.name]
    assert learning["facts_per_user"] > 0 and learning["reflections_per_user"] > 0
    assert "| figure |" in (tmp_path / "out" / "latest.md").read_text(encoding="utf-8")


def test_recall_scaling_runs_both_corpora_side_by_side(tmp_path: Path) -> None:
    cfg = RunConfig(
        [TINY], SMOKE, cache_dir=tmp_path / "cache", out_dir=tmp_path / "out", chart=False
    )
    # The same size twice: the side-by-side machinery, not a real scaling figure.
    scaling = run_scaling(cfg, TINY, TINY, lambda _line: None)
    assert scaling["scales"] == [TINY.name, TINY.name]
    for side in ("small_ms", "large_ms"):
        assert scaling[side]["n"] == SMOKE.recall_iters
        assert _positive(scaling[side]["p95"])
    assert _positive(scaling["p95_ratio"])
    assert not (tmp_path / "cache" / "scaling-small").exists()  # the copies are removed

    tiny = {"recall_search": {"picobot_ms": {"p95": 1.0}, "p95_ratio": 1.0, "p50_ratio": 1.0}}
    entry = report.build({TINY.name: tiny}, {}, scaling)["recall_search"]
    assert entry["p95_1m_over_100k"] == scaling["p95_ratio"]
    assert entry["scaling"] is scaling


def test_recall_at_1m_is_held_to_its_absolute_target() -> None:
    def recall(p95: float) -> dict[str, object]:
        return {"picobot_ms": {"p95": p95}, "p95_ratio": 1.0, "p50_ratio": 1.0}

    for p95, ok in ((12.0, True), (report.RECALL_1M_LIMIT_MS + 1, False)):
        by_scale = {"100k": {"recall_search": recall(1.0)}, "1M": {"recall_search": recall(p95)}}
        entry = report.build(by_scale, {})["recall_search"]
        assert entry["p95_1m_ms"] == p95
        assert entry["by_scale"]["1M"]["pass"]  # the ratio target alone
        assert entry["pass"] is ok


def test_postgres_bench_on_a_tiny_corpus(tmp_path: Path) -> None:
    """The PostgreSQL stage alone: copy, index rebuild, turn overhead, capacity."""
    import asyncio
    import os

    from bench.common import BenchContext
    from bench.corpus import ensure_corpus, work_copy
    from bench.postgres import SERVER_ENV, postgres_benches
    from tests.pg.cluster import find_bindir

    if find_bindir() is None and not os.environ.get(SERVER_ENV):
        pytest.skip(f"no PostgreSQL server binaries and no ${SERVER_ENV}")
    corpus = ensure_corpus(tmp_path / "cache", TINY, 7, lambda _line: None)
    db_path = work_copy(corpus, tmp_path / "cache" / "run")
    ctx = BenchContext(TINY, db_path, SMOKE, 7, lambda _line: None)
    result = asyncio.run(postgres_benches(ctx))

    assert result["setup"]["rows_copied"] > TINY.messages
    assert result["setup"]["records_indexed"] >= TINY.messages
    ratios = ("turn_p95_ratio", "capacity_ratio", "postgres_over_sqlite_ratio", "purge_p99_ratio")
    assert result["purge"]["victim_messages"] == SMOKE.victim_sessions * 100
    for key in ratios:
        assert _positive(result[key]), key
    assert result["error_frames"] == 0
    assert not (db_path.parent / "postgres").exists()  # the instances' directories go
    entry = report.build({TINY.name: {"postgres": result}}, {})["postgres"]
    assert isinstance(entry["pass"], bool)
    assert entry["turn_p95_ratio"] == result["turn_p95_ratio"]


def test_postgres_bench_skipped_is_reported_not_failed() -> None:
    skipped = {"skipped": "no PostgreSQL server binaries"}
    entry = report.build({TINY.name: {"postgres": skipped}}, {})["postgres"]
    assert entry["pass"] is True
    assert report.missed({"postgres": entry}) == []


def test_one_bench_alone_writes_its_own_report(tmp_path: Path) -> None:
    cfg = RunConfig(
        [TINY],
        SMOKE,
        cache_dir=tmp_path / "cache",
        out_dir=tmp_path / "out",
        chart=False,
        only=("write",),
    )
    seen: list[str] = []
    run(cfg, progress=seen.append)

    assert not (tmp_path / "out" / "latest.json").exists()  # a full run's report is kept
    data = json.loads((tmp_path / "out" / "latest-write.json").read_text(encoding="utf-8"))
    assert set(data) == {"meta", "write"}
    assert _positive(data["write"]["by_scale"][TINY.name]["p99_ratio"])
    table = (tmp_path / "out" / "latest-write.md").read_text(encoding="utf-8")
    assert "Overall: write" in table and "recall p95" not in table
    assert not any("prompt cache" in line or "turn_overhead" in line for line in seen)


def test_an_unknown_bench_name_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--scale", "tiny", "--only", "write,netwrok"])
    assert stopped.value.code == 2
    assert "unknown bench netwrok" in capsys.readouterr().err
