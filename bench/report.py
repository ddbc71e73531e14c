"""Targets, pass/fail, and the three outputs: latest.json, latest.md, latency.png.

Every bench's top-level entry holds its headline figures as the worst case over the
corpus sizes measured (highest ratio or latency, lowest throughput), ``pass`` (every
size met the target) and ``by_scale`` with the full per-size results.
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


def _write_ok(r: Result) -> bool:
    return bool(r["p50_ratio"] <= 5 and r["picobot_ms"]["p99"] <= r["p99_bound_ms"])


TARGETS: dict[str, Target] = {
    "turn_overhead": Target(
        "p50 and p95 <= 2.5x the raw sqlite3 statements",
        lambda r: r["p50_ratio"] <= 2.5 and r["p95_ratio"] <= 2.5,
        (("p50_ratio", "max"), ("p95_ratio", "max")),
    ),
    "recall_search": Target(
        "p95 <= 1.5x the raw FTS query; p95 at 1M <= 3x p95 at 100k",
        lambda r: r["p95_ratio"] <= 1.5,
        (("p50_ratio", "max"), ("p95_ratio", "max")),
    ),
    "write": Target(
        "p50 <= 5x a raw single-row commit; p99 <= 3x p50 + 1 ms",
        _write_ok,
        (("p50_ratio", "max"), ("p99_ratio", "max"), ("p99_over_bound", "max")),
    ),
    "websocket": Target(
        ">= 750 turns/s (100 clients, closed loop) and p95 <= 20 ms (paced at 750 turns/s)",
        lambda r: r["turns_per_s"] >= 750 and r["p95_ms"] <= 20,
        (
            ("turns_per_s", "min"),
            ("p95_ms", "max"),
            ("turns_per_s_ratio", "min"),
            ("p95_ratio", "max"),
        ),
    ),
    "webhook": Target(
        "ack p95 <= 3x a raw aiohttp POST round trip",
        lambda r: r["p95_ratio"] <= 3,
        (("p50_ratio", "max"), ("p95_ratio", "max")),
        source="bench (the issue sets none)",
    ),
    "purge": Target(
        "other users' turn p99 during the purge <= 5x their p99 without one",
        lambda r: r["p99_ratio"] <= 5,
        (("duration_s", "max"), ("p99_ratio", "max"), ("max_stall_ms", "max")),
        source="bench (the issue sets none)",
    ),
}

SCALING_LIMIT = 3.0


def _worst(values: list[float], how: str) -> float:
    finite = [v for v in values if isinstance(v, int | float)]
    if not finite:
        return math.nan
    return max(finite) if how == "max" else min(finite)


def build(
    by_scale: dict[str, dict[str, Result]],
    meta: dict[str, Any],
    scaling: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole report: meta plus one entry per bench.

    ``scaling`` is ``recall_scaling``'s result (100k and 1M side by side): its ratio is
    the one held to the scaling target. The ratio of the two per-size recall benches,
    run minutes apart, is reported beside it.
    """
    report: dict[str, Any] = {"meta": meta}
    for name, target in TARGETS.items():
        per = {scale: results[name] for scale, results in by_scale.items() if name in results}
        for result in per.values():
            result["pass"] = target.check(result)
        entry: dict[str, Any] = {
            "target": target.text,
            "target_source": target.source,
            "pass": bool(per) and all(r["pass"] for r in per.values()),
        }
        for key, how in target.headline:
            entry[key] = _worst([r[key] for r in per.values()], how)
        entry["by_scale"] = per
        report[name] = entry
    recall = report["recall_search"]
    if "100k" in by_scale and "1M" in by_scale:
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
    return report


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _mark(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _lines(name: str, scale: str, r: Result) -> list[list[str]]:
    """(figure, PicoBot, raw, ratio) rows of one per-size result."""

    def ms(v: float) -> str:
        return f"{v:.3f} ms" if v < 10 else f"{v:.1f} ms"

    if name in ("turn_overhead", "recall_search", "webhook", "write"):
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
    if name == "websocket":
        pico, echo = r["picobot"], r["raw_echo"]
        return [
            [
                "websocket turns/s (closed loop)",
                scale,
                f"{r['turns_per_s']:.0f}",
                f"{echo['capacity']['turns_per_s']:.0f}",
                f"{r['turns_per_s_ratio']:.3f}x",
            ],
            [
                f"websocket p95 (paced {pico['paced']['offered_turns_per_s']:g}/s)",
                scale,
                ms(r["p95_ms"]),
                ms(echo["paced"]["latency_ms"]["p95"]),
                f"{r['p95_ratio']:.1f}x",
            ],
            [
                f"websocket p95 (paced {r['half_capacity_turns_per_s']:g}/s = half capacity)",
                scale,
                ms(r["half_capacity_p95_ms"]),
                ms(echo["paced_half_capacity"]["latency_ms"]["p95"]),
                f"{r['half_capacity_p95_ratio']:.1f}x",
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
        entry = report[name]
        for scale, result in entry["by_scale"].items():
            for cells in _lines(name, scale, result):
                out.append(_row([*cells, target.text, _mark(result["pass"])]))
    scaling = report["recall_search"].get("p95_1m_over_100k")
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
    out += ["", "Overall: " + ", ".join(f"{n} {_mark(report[n]['pass'])}" for n in TARGETS), ""]
    return "\n".join(out)


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
    report: dict[str, Any], sizes: dict[str, int], out_dir: Path, *, with_chart: bool
) -> list[Path]:
    """Write latest.json, latest.md and (optionally) latency.png; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "latest.json", out_dir / "latest.md"]
    paths[0].write_text(json.dumps(_clean(report), indent=2) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(report), encoding="utf-8")
    if with_chart:
        paths.append(out_dir / "latency.png")
        chart(report, sizes, paths[-1])
    return paths
