"""A strict checker of the Prometheus text exposition format (0.0.4), for tests.

:func:`parse_exposition` accepts only HELP, TYPE and sample lines of the grammar,
requires a metric's TYPE before its samples, and checks that histograms are
cumulative with ``+Inf`` equal to ``_count``.
"""

from __future__ import annotations

import math
import re

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_VALUE = r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|Inf)|NaN"
_SAMPLE = re.compile(
    rf"(?P<name>{_NAME})(?:\{{(?P<labels>{_LABEL}(?:,{_LABEL})*,?)?\}})? (?P<value>{_VALUE})"
    r"(?: -?\d+)?"
)
_HELP = re.compile(rf"# HELP (?P<name>{_NAME}) (?:[^\\\n]|\\[\\n])*")
_TYPE = re.compile(rf"# TYPE (?P<name>{_NAME}) (?:counter|gauge|histogram|summary|untyped)")
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _unescape(value: str) -> str:
    return re.sub(r"\\([\\\"n])", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse_exposition(text: str) -> Samples:
    """Check ``text`` against the exposition grammar; return ``{(name, labels): value}``."""
    assert text.endswith("\n"), "the exposition ends with a line feed"
    typed: dict[str, str] = {}
    samples: Samples = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            assert _HELP.fullmatch(line), f"bad HELP line: {line!r}"
            continue
        if line.startswith("# TYPE "):
            match = _TYPE.fullmatch(line)
            assert match, f"bad TYPE line: {line!r}"
            assert match["name"] not in typed, f"second TYPE for {match['name']}"
            typed[match["name"]] = line.rsplit(" ", 1)[1]
            continue
        match = _SAMPLE.fullmatch(line)
        assert match, f"not a sample line: {line!r}"
        name = match["name"]
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in typed or (base in typed and typed[base] == "histogram"), (
            f"sample {name} before its TYPE line"
        )
        labels = frozenset((k, _unescape(v)) for k, v in _PAIR.findall(match["labels"] or ""))
        key = (name, labels)
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(match["value"])
    _check_histograms(typed, samples)
    return samples


def _check_histograms(typed: dict[str, str], samples: Samples) -> None:
    for name, kind in typed.items():
        if kind != "histogram":
            continue
        series: dict[frozenset[tuple[str, str]], list[tuple[float, float]]] = {}
        for (sample, labels), value in samples.items():
            if sample == f"{name}_bucket":
                le = dict(labels)["le"]
                rest = frozenset((k, v) for k, v in labels if k != "le")
                series.setdefault(rest, []).append((float(le), value))
        for rest, buckets in series.items():
            buckets.sort()
            counts = [count for _, count in buckets]
            assert counts == sorted(counts), f"{name} buckets are not cumulative"
            assert buckets[-1][0] == math.inf, f"{name} has no +Inf bucket"
            assert buckets[-1][1] == samples[(f"{name}_count", rest)]
            assert (f"{name}_sum", rest) in samples


def sample(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (KeyError if absent)."""
    return samples[(name, frozenset(labels.items()))]
