"""Targets, pass/fail, and the three outputs: latest.json, latest.md, latency.png.

Every bench's top-level entry holds its headline figures as the worst case over the
corpus sizes measured (highest ratio or latency, lowest throughput), ``pass`` (every
size met the target) and ``by_scale`` with the full per-size results. The prompt-cache
figures (:mod:`bench.prompt_cache`) are measured once per run, not per corpus size:
their entries (:data:`RUN_TARGETS`) hold the figures and ``pass``, which is ``None``
when the figure was not measured (the time to first token without the local model).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Result = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Target:
    """A bench's target: words for people and a check of one per-size result."""

    text: str
    check: Callable[[Result], bool]
    headline: tuple[tuple[str, str], ...]
    """(key, "max" | "min"): figures lifted to the top level, worst case over sizes."""
    source: str = "issue"


SCALING_LIMIT = 3.0
"""Recall p95 at 1M over p95 at 100k, measured side by side."""
RECALL_1M_LIMIT_MS = 50.0
"""Recall p95 at 1M stored messages, absolute (issue 22, on the 2-core machine)."""
CAPACITY_RATIO_LIMIT = 0.9
"""WebSocket capacity, PicoBot over the bare-SQL server in the same run (issue 23)."""
LEARNING_LIMIT = 1.10
"""A turn with learned facts, reflections and digests over one without (issue 24)."""
CHAT_ENDPOINT_LIMIT = 1.2
"""A streamed turn over the OpenAI-compatible endpoint over a WebSocket turn (issue 37)."""
PREFIX_SHARE_LIMIT = 0.85
TTFT_LIMIT = 3.0


PURGE_P99_LIMIT = 5.0
"""Other users' turn p99 during a purge over without one (set by the bench)."""
PG_TURN_LIMIT = 2.5
"""A turn on PostgreSQL over the same statements through the raw driver (issue 36)."""


def _postgres_ok(r: Result) -> bool:
    """Skipped (no server) misses nothing; else the turn ratio and no error frames."""
    if "skipped" in r:
        return True
    return bool(
        r["turn_p95_ratio"] <= PG_TURN_LIMIT
        and r["purge_p99_ratio"] <= PURGE_P99_LIMIT
        and r["error_frames"] == 0
    )


def _write_ok(r: Result) -> bool:
    return bool(r["p50_ratio"] <= 5 and r["picobot_ms"]["p99"] <= r["p99_bound_ms"])


TARGETS: dict[str, Target] = {
    "turn_overhead": Target(
        "p50 and p95 <= 2.5x the raw sqlite3 statements",
        lambda r: r["p50_ratio"] <= 2.5 and r["p95_ratio"] <= 2.5,
        (("p50_ratio", "max"), ("p95_ratio", "max")),
    ),
    "recall_search": Target(
        "p95 <= 1.5x the same recall on a plain connection; p95 at 1M <= 3x p95 at 100k"
        f" and <= {RECALL_1M_LIMIT_MS:g} ms",
        lambda r: r["p95_ratio"] <= 1.5,
        (("p50_ratio", "max"), ("p95_ratio", "max")),
    ),
    "write": Target(
        "p50 <= 5x a raw single-row commit; p99 <= 3x p50 + 1 ms",
        _write_ok,
        (("p50_ratio", "max"), ("p99_ratio", "max"), ("p99_over_bound", "max")),
    ),
    "websocket": Target(
        f"capacity (100 clients, closed loop) >= {CAPACITY_RATIO_LIMIT:g}x the bare-SQL"
        " server's, no error frames; p95 at half capacity informational",
        lambda r: r["capacity_ratio"] >= CAPACITY_RATIO_LIMIT and r["error_frames"] == 0,
        (
            ("capacity_ratio", "min"),
            ("turns_per_s", "min"),
            ("bare_sql_turns_per_s", "min"),
            ("returning_capacity_ratio", "min"),
            ("quiet_capacity_ratio", "min"),
            ("quiet_returning_capacity_ratio", "min"),
            ("half_capacity_p95_ms", "max"),
            ("bare_sql_half_capacity_p95_ms", "max"),
            ("half_capacity_p95_ratio", "max"),
            ("echo_capacity_ratio", "min"),
            ("error_frames", "max"),
        ),
    ),
    "webhook": Target(
        "ack p95 <= 3x a raw aiohttp POST round trip",
        lambda r: r["p95_ratio"] <= 3,
        (("p50_ratio", "max"), ("p95_ratio", "max")),
        source="bench (the issue sets none)",
    ),
    "chat_endpoint": Target(
        f"streamed turn p50 and p95 <= {CHAT_ENDPOINT_LIMIT:g}x a WebSocket turn, same run,"
        " no errors",
        lambda r: (
            r["p50_ratio"] <= CHAT_ENDPOINT_LIMIT
            and r["p95_ratio"] <= CHAT_ENDPOINT_LIMIT
            and r["errors"] == 0
        ),
        (("p50_ratio", "max"), ("p95_ratio", "max"), ("whole_p95_ratio", "max"), ("errors", "max")),
    ),
    "learning_overhead": Target(
        f"p50 and p95 <= {LEARNING_LIMIT:g}x the same turns with [memory.learning] off",
        lambda r: r["p50_ratio"] <= LEARNING_LIMIT and r["p95_ratio"] <= LEARNING_LIMIT,
        (("p50_ratio", "max"), ("p95_ratio", "max")),
    ),
    "vectors": Target(
        f"recall p95 with vectors <= {RECALL_1M_LIMIT_MS:g} ms; embedding one message and a"
        " turn with embeddings on reported",
        lambda r: r["recall_p95_ms"] <= RECALL_1M_LIMIT_MS,
        (("recall_p95_ms", "max"), ("recall_p95_ratio", "max"), ("turn_p95_ratio", "max")),
    ),
    "mcp_search": Target(
        "informational: an MCP search_memory call (SDK client, streamable HTTP) against"
        " the same search through the admin API, same run",
        lambda r: True,
        (("p50_ratio", "max"), ("p95_ratio", "max")),
        source="bench (the issue sets none)",
    ),
    "cluster": Target(
        "informational: WebSocket capacity of two serve instances on one SQLite file"
        " against one, same run, no error frames",
        lambda r: r["error_frames"] == 0,
        (("capacity_ratio", "min"), ("error_frames", "max")),
        source="bench (the issue sets its figure on PostgreSQL)",
    ),
    "postgres": Target(
        f"turn p95 on PostgreSQL <= {PG_TURN_LIMIT:g}x the same statements through psycopg;"
        f" other users' turn p99 during a purge <= {PURGE_P99_LIMIT:g}x without, as on SQLite;"
        " capacity of two instances on one database against one, no error frames"
        " (skipped without a PostgreSQL server)",
        _postgres_ok,
        (
            ("turn_p50_ratio", "max"),
            ("turn_p95_ratio", "max"),
            ("capacity_ratio", "min"),
            ("postgres_over_sqlite_ratio", "min"),
            ("purge_p99_ratio", "max"),
            ("error_frames", "max"),
        ),
    ),
    "purge": Target(
        "other users' turn p99 during the purge <= 5x their p99 without one",
        lambda r: r["p99_ratio"] <= PURGE_P99_LIMIT,
        (("duration_s", "max"), ("p99_ratio", "max"), ("max_stall_ms", "max")),
        source="bench (the issue sets none)",
    ),
}


@dataclass(frozen=True, slots=True)
class RunTarget:
    """A target on a figure measured once per run (not per corpus size)."""

    text: str
    source: str = "issue"


RUN_TARGETS: dict[str, RunTarget] = {
    "prompt_prefix": RunTarget(
        f"median share of a prompt that repeats the previous one >= {PREFIX_SHARE_LIMIT:g}"
    ),
    "prompt_ttft": RunTarget(
        f"time to first token, median of turns 45-100 <= {TTFT_LIMIT:g}x turns 1-5"
        " (bundled local model)"
    ),
}


def _worst(values: list[Any], how: str) -> float:
    finite = [v for v in values if isinstance(v, int | float)]
    if not finite:
        return math.nan
    return max(finite) if how == "max" else min(finite)


def build(
    by_scale: dict[str, dict[str, Result]],
    meta: dict[str, Any],
    scaling: dict[str, Any] | None = None,
    prompt: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole report: meta plus one entry per bench.

    ``scaling`` is ``recall_scaling``'s result (100k and 1M side by side): its ratio is
    the one held to the scaling target. The ratio of the two per-size recall benches,
    run minutes apart, is reported beside it. ``prompt`` is
    :func:`bench.prompt_cache.run`'s result (its entries are left out without it).
    """
    report: dict[str, Any] = {"meta": meta}
    for name, target in TARGETS.items():
        per = {scale: results[name] for scale, results in by_scale.items() if name in results}
        if not per:  # not run (``python -m bench --only``)
            continue
        for result in per.values():
            result["pass"] = target.check(result)
        entry: dict[str, Any] = {
            "target": target.text,
            "target_source": target.source,
            "pass": all(r["pass"] for r in per.values()),
        }
        for key, how in target.headline:
            # A skipped bench's result has no figures (``None`` is left out of the worst).
            entry[key] = _worst([r.get(key) for r in per.values()], how)
        entry["by_scale"] = per
        report[name] = entry
    if "recall_search" in report:
        _recall_entries(report["recall_search"], scaling)
    if prompt is not None:
        report.update(_prompt_entries(prompt))
    return report


def _recall_entries(recall: dict[str, Any], scaling: dict[str, Any] | None) -> None:
    """The recall entry's figures across corpus sizes: 1M against 100k, and at 1M."""
    if "100k" in recall["by_scale"] and "1M" in recall["by_scale"]:
        small = recall["by_scale"]["100k"]["picobot_ms"]["p95"]
        large = recall["by_scale"]["1M"]["picobot_ms"]["p95"]
        recall["p95_1m_over_100k_separate_runs"] = round(large / small, 3)
    if scaling is not None:
        recall["scaling"] = scaling
        recall["p95_1m_over_100k"] = scaling["p95_ratio"]
        recall["pass"] = recall["pass"] and scaling["p95_ratio"] <= SCALING_LIMIT
    else:
        recall["p95_1m_over_100k"] = None
        recall["scaling_note"] = "needs both corpus sizes (BENCH_SCALE=full)"
    if "1M" in recall["by_scale"]:
        recall["p95_1m_ms"] = recall["by_scale"]["1M"]["picobot_ms"]["p95"]
        recall["pass"] = recall["pass"] and recall["p95_1m_ms"] <= RECALL_1M_LIMIT_MS
    else:
        recall["p95_1m_ms"] = None
        recall["p95_1m_note"] = "needs the 1M corpus (BENCH_SCALE=full)"


def _prompt_entries(prompt: dict[str, Any]) -> dict[str, Any]:
    """The prompt-cache figures as report entries with their targets."""

    def entry(name: str) -> dict[str, Any]:
        target = RUN_TARGETS[name]
        return {"target": target.text, "target_source": target.source}

    prefix = prompt["prefix"]
    share = prefix["blocks"]["median_share"]
    out = {
        "prompt_prefix": {
            **entry("prompt_prefix"),
            "pass": share >= PREFIX_SHARE_LIMIT,
            "median_share": share,
            "sliding_median_share": prefix["sliding"]["median_share"],
            "turns": prefix["turns"],
            "detail": prefix,
        }
    }
    ttft = prompt.get("ttft") or {"skipped": "not run (ttft_turns = 0, as in --scale tiny)"}
    late_over_early = ttft.get("late_over_early")
    if "skipped" in ttft or not isinstance(late_over_early, int | float):
        out["prompt_ttft"] = {
            **entry("prompt_ttft"),
            "pass": None,
            "skipped": ttft.get("skipped", "no figure"),
            "detail": ttft,
        }
    else:
        out["prompt_ttft"] = {
            **entry("prompt_ttft"),
            "pass": late_over_early <= TTFT_LIMIT,
            "late_over_early": late_over_early,
            "early_median_s": ttft["early_median_s"],
            "late_median_s": ttft["late_median_s"],
            "detail": ttft,
        }
    return out


def missed(report: dict[str, Any]) -> list[str]:
    """The names of the targets the report's figures missed (skipped ones are not)."""
    names = [*TARGETS, *RUN_TARGETS]
    return [n for n in names if n in report and report[n]["pass"] is False]


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _mark(ok: bool | None) -> str:
    return "skipped" if ok is None else "PASS" if ok else "FAIL"


def _lines(name: str, scale: str, r: Result) -> list[list[str]]:
    """(figure, corpus, PicoBot, baseline, ratio) rows of one per-size result, or rows
    that also carry their own target and result (informational figures)."""

    def ms(v: float) -> str:
        return f"{v:.3f} ms" if v < 10 else f"{v:.1f} ms"

    if name in (
        "turn_overhead",
        "recall_search",
        "webhook",
        "write",
        "learning_overhead",
        "mcp_search",
    ):
        pico, raw = r["picobot_ms"], r["raw_ms"]
        pcts = ("p50", "p99") if name == "write" else ("p50", "p95")
        rows = [
            [f"{name} {p}", scale, ms(pico[p]), ms(raw[p]), f"{r[p + '_ratio']:.2f}x"] for p in pcts
        ]
        if name == "write":
            rows.append(
                [
                    "write p99 bound (3x p50 + 1 ms)",
                    scale,
                    ms(pico["p99"]),
                    ms(r["p99_bound_ms"]),
                    f"{r['p99_over_bound']:.2f}x",
                ]
            )
        return rows
    if name == "chat_endpoint":
        ws = r["websocket_ms"]
        rows = [
            [
                f"chat endpoint streamed turn {p} vs WebSocket",
                scale,
                ms(r["openai_stream_ms"][p]),
                ms(ws[p]),
                f"{r[p + '_ratio']:.2f}x",
            ]
            for p in ("p50", "p95")
        ]
        rows.append(
            [
                "chat endpoint whole answer p95 vs WebSocket",
                scale,
                ms(r["openai_whole_ms"]["p95"]),
                ms(ws["p95"]),
                f"{r['whole_p95_ratio']:.2f}x",
                "informational",
                "",
            ]
        )
        return rows
    if name == "websocket":
        echo = r["raw_echo"]
        half = f"{r['half_capacity_turns_per_s']:g}/s"
        return [
            [
                "websocket turns/s (closed loop) vs the bare-SQL server",
                scale,
                f"{r['turns_per_s']:.0f}",
                f"{r['bare_sql_turns_per_s']:.0f}",
                f"{r['capacity_ratio']:.3f}x",
            ],
            [
                "websocket turns/s, the first run's users back in their long sessions",
                scale,
                f"{r['returning_turns_per_s']:.0f}",
                f"{r['bare_sql_returning_turns_per_s']:.0f}",
                f"{r['returning_capacity_ratio']:.3f}x",
                "informational",
                "",
            ],
            [
                "the same, summaries and learning off (the turn path alone)",
                scale,
                f"{r['quiet_returning_turns_per_s']:.0f}",
                f"{r['bare_sql_returning_turns_per_s']:.0f}",
                f"{r['quiet_returning_capacity_ratio']:.3f}x",
                "informational",
                "",
            ],
            [
                f"websocket p95 paced at {half} (half PicoBot's capacity) vs bare SQL",
                scale,
                ms(r["half_capacity_p95_ms"]),
                ms(r["bare_sql_half_capacity_p95_ms"]),
                f"{r['half_capacity_p95_ratio']:.1f}x",
                "informational",
                "",
            ],
            [
                "websocket turns/s (closed loop) vs a raw echo server",
                scale,
                f"{r['turns_per_s']:.0f}",
                f"{echo['capacity']['turns_per_s']:.0f}",
                f"{r['echo_capacity_ratio']:.3f}x",
                "informational",
                "",
            ],
            [
                f"websocket p95 paced at {half} vs a raw echo server",
                scale,
                ms(r["half_capacity_p95_ms"]),
                ms(r["echo_half_capacity_p95_ms"]),
                "",
                "informational",
                "",
            ],
        ]
    if name == "cluster":
        return [
            [
                "cluster: turns/s of two instances on one SQLite file vs one (closed loop)",
                scale,
                f"{r['two_instances_turns_per_s']:.0f}",
                f"{r['one_instance_turns_per_s']:.0f}",
                f"{r['capacity_ratio']:.2f}x",
            ]
        ]
    if name == "postgres":
        return _postgres_lines(scale, r, ms)
    if name == "vectors":
        emb, turn, turn_off = r["embedding_ms"], r["turn_ms"], r["turn_keywords_ms"]
        return [
            [
                f"vectors: embedding one message p50 / p95 ({r['model']})",
                scale,
                f"{emb['p50']:.1f} / {emb['p95']:.1f} ms",
                "",
                "",
                "informational",
                "",
            ],
            [
                f"vectors: recall p95, {r['vector_users']} users' vectors fused vs keywords only",
                scale,
                ms(r["recall_ms"]["p95"]),
                ms(r["recall_keywords_ms"]["p95"]),
                f"{r['recall_p95_ratio']:.2f}x",
            ],
            [
                "vectors: turn p95 with embeddings on vs off",
                scale,
                ms(turn["p95"]),
                ms(turn_off["p95"]),
                f"{r['turn_p95_ratio']:.2f}x",
                "informational",
                "",
            ],
        ]
    during, quiet = r["other_turns_during_purge_ms"], r["other_turns_without_purge_ms"]
    return [
        [
            f"purge {r['victim_messages']:,} msgs: duration",
            scale,
            f"{r['duration_s']:.2f} s",
            "",
            "",
        ],
        [
            "purge: other users' turn p99",
            scale,
            ms(during["p99"]),
            ms(quiet["p99"]) + " (no purge)",
            f"{r['p99_ratio']:.1f}x",
        ],
    ]


def _postgres_lines(scale: str, r: Result, ms: Callable[[float], str]) -> list[list[str]]:
    """The PostgreSQL stage's rows: its turn and capacity ratios, and the setup's times."""
    if "skipped" in r:
        return [["postgres: " + r["skipped"], scale, "", "", "", "", "skipped"]]
    turn, cluster, setup, purge = r["turn_overhead"], r["cluster"], r["setup"], r["purge"]
    pico, raw = turn["picobot_ms"], turn["raw_ms"]
    rows = [
        [
            f"postgres turn {p} vs psycopg",
            scale,
            ms(pico[p]),
            ms(raw[p]),
            f"{turn[p + '_ratio']:.2f}x",
        ]
        for p in ("p50", "p95")
    ]
    return [
        *rows,
        [
            "postgres: turns/s of two instances on one database vs one (closed loop)",
            scale,
            f"{cluster['two_instances_turns_per_s']:.0f}",
            f"{cluster['one_instance_turns_per_s']:.0f}",
            f"{cluster['capacity_ratio']:.2f}x",
        ],
        [
            "postgres: turns/s of one instance on PostgreSQL vs one on SQLite",
            scale,
            f"{cluster['one_instance_turns_per_s']:.0f}",
            f"{cluster['sqlite_one_instance_turns_per_s']:.0f}",
            f"{cluster['postgres_over_sqlite_ratio']:.2f}x",
            "informational",
            "",
        ],
        [
            f"postgres purge {purge['victim_messages']:,} msgs: other users' turn p99",
            scale,
            ms(purge["other_turns_during_purge_ms"]["p99"]),
            ms(purge["other_turns_without_purge_ms"]["p99"]) + " (no purge)",
            f"{purge['p99_ratio']:.1f}x",
        ],
        [
            f"postgres setup: StoreCopy of {setup['rows_copied']:,} rows; recall index"
            f" rebuilt ({setup['records_indexed']:,} records); ANALYZE",
            scale,
            "; ".join(f"{setup[k]:.1f} s" for k in ("copy_s", "index_rebuild_s", "analyze_s")),
            "",
            "",
            "informational",
            "",
        ],
    ]


def markdown(report: dict[str, Any]) -> str:
    """The results table."""
    meta = report["meta"]
    out = [
        "# PicoBot benchmark results",
        "",
        f"Run {meta['finished_at']} on {meta['machine']}; corpus sizes: "
        f"{', '.join(meta['scales'])}; seed {meta['seed']}. Ratios are PicoBot / baseline, "
        "measured in the same run on the same database. See docs/performance.md.",
        "",
        f"1-minute load average at start {meta['load_avg_1_5_15_start'][0]}, at the end "
        f"{meta['load_avg_1_5_15_end'][0]} (2 = both cores busy before the bench started).",
        "",
        _row(["figure", "corpus", "PicoBot", "baseline", "ratio", "target", "result"]),
        _row(["---"] * 7),
    ]
    for name, target in TARGETS.items():
        for scale, result in report.get(name, {}).get("by_scale", {}).items():
            for cells in _lines(name, scale, result):
                if len(cells) == 5:
                    cells = [*cells, target.text, _mark(result["pass"])]
                out.append(_row(cells))
    if "recall_search" in report:
        out += _recall_lines(report["recall_search"])
    out += _prompt_lines(report)
    names = [n for n in (*TARGETS, *RUN_TARGETS) if n in report]
    out += ["", "Overall: " + ", ".join(f"{n} {_mark(report[n]['pass'])}" for n in names), ""]
    return "\n".join(out)


def _recall_lines(recall: dict[str, Any]) -> list[str]:
    """The rows of the recall figures across corpus sizes."""
    out: list[str] = []
    limit = f"<= {RECALL_1M_LIMIT_MS:g} ms"
    if recall.get("p95_1m_ms") is not None:
        p95 = recall["p95_1m_ms"]
        out.append(
            _row(
                [
                    "recall p95 at 1M",
                    "1M",
                    f"{p95:.3f} ms",
                    "",
                    "",
                    limit,
                    _mark(p95 <= RECALL_1M_LIMIT_MS),
                ]
            )
        )
    else:
        out.append(_row(["recall p95 at 1M", "", recall["p95_1m_note"], "", "", limit, "n/a"]))
    scaling = recall.get("p95_1m_over_100k")
    if scaling is not None:
        out.append(
            _row(
                [
                    "recall p95 1M / 100k (side by side)",
                    "both",
                    f"{scaling:.2f}x",
                    "",
                    "",
                    f"<= {SCALING_LIMIT:g}x",
                    _mark(scaling <= SCALING_LIMIT),
                ]
            )
        )
    return out


def _prompt_lines(report: dict[str, Any]) -> list[str]:
    """The prompt-cache rows (measured once per run, on a chat of their own)."""
    out: list[str] = []
    prefix = report.get("prompt_prefix")
    if prefix is not None:
        share, sliding = prefix["median_share"], prefix["sliding_median_share"]
        out.append(
            _row(
                [
                    f"prompt prefix share, median of {prefix['turns']} turns vs a sliding window",
                    "own chat",
                    f"{share:.3f}",
                    f"{sliding:.3f}",
                    f"{share / sliding:.2f}x" if sliding else "",
                    prefix["target"],
                    _mark(prefix["pass"]),
                ]
            )
        )
    ttft = report.get("prompt_ttft")
    if ttft is not None:
        if ttft["pass"] is None:
            cells = [ttft["skipped"], "", ""]
        else:
            cells = [
                f"{ttft['late_median_s']:.3f} s",
                f"{ttft['early_median_s']:.3f} s",
                f"{ttft['late_over_early']:.2f}x",
            ]
        out.append(
            _row(
                [
                    "time to first token, turns 45-100 vs turns 1-5",
                    "own chat",
                    *cells,
                    ttft["target"],
                    _mark(ttft["pass"]),
                ]
            )
        )
    return out


def chart(report: dict[str, Any], sizes: dict[str, int], path: Path) -> None:
    """Latency percentiles against corpus size, PicoBot solid and raw dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullFormatter, NullLocator, ScalarFormatter

    panels = (("turn_overhead", "turn"), ("recall_search", "recall search"), ("write", "write"))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    for ax, (name, title) in zip(axes, panels, strict=True):
        per = report[name]["by_scale"]
        scales = [s for s in per if s in sizes]
        xs = [sizes[s] for s in scales]
        for pct, color in (("p50", "tab:blue"), ("p95", "tab:orange"), ("p99", "tab:red")):
            for side, style, marker in (("picobot_ms", "-", "o"), ("raw_ms", "--", "x")):
                ys = [per[s][side][pct] for s in scales]
                label = f"{'PicoBot' if side == 'picobot_ms' else 'raw sqlite3'} {pct}"
                ax.plot(xs, ys, style, color=color, marker=marker, markersize=8, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(xs, [f"{s} msgs" for s in scales])
        ax.set_xlim(min(xs) / 2, max(xs) * 2)
        ax.set_title(title)
        ax.set_ylabel("latency (ms)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("PicoBot latency percentiles vs corpus size (solid: PicoBot, dashed: raw)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: those become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def write_outputs(
    report: dict[str, Any],
    sizes: dict[str, int],
    out_dir: Path,
    *,
    with_chart: bool = False,
    stem: str = "latest",
) -> list[Path]:
    """Write ``stem``.json, ``stem``.md and (optionally) latency.png; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.json", out_dir / f"{stem}.md"]
    paths[0].write_text(json.dumps(_clean(report), indent=2) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(report), encoding="utf-8")
    if with_chart:
        paths.append(out_dir / "latency.png")
        chart(report, sizes, paths[-1])
    return paths
