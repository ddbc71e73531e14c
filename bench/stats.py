"""Latency samples, percentiles and ratios: the arithmetic every bench shares."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

P = TypeVar("P")
R = TypeVar("R")


def now_ns() -> int:
    """A monotonic clock in nanoseconds (the one every sample is taken with)."""
    return time.perf_counter_ns()


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linearly interpolated."""
    if not values:
        return math.nan
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


def dist_ms(samples_ns: Sequence[int]) -> dict[str, Any]:
    """n, mean, p50, p95, p99 and max of nanosecond samples, in milliseconds."""
    ms = [s / 1e6 for s in samples_ns]
    return {
        "n": len(ms),
        "mean": round(sum(ms) / len(ms), 4) if ms else math.nan,
        "p50": round(percentile(ms, 50), 4),
        "p95": round(percentile(ms, 95), 4),
        "p99": round(percentile(ms, 99), 4),
        "max": round(max(ms), 4) if ms else math.nan,
    }


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator`` rounded to 3 places (inf for a zero denominator)."""
    if denominator <= 0:
        return math.inf
    return round(numerator / denominator, 3)


class Ticker:
    """Progress lines for a loop of ``total`` steps, at most one per tenth."""

    def __init__(self, label: str, total: int, emit: Any) -> None:
        self._label = label
        self._total = max(1, total)
        self._emit = emit
        self._next = 0

    def step(self, done: int) -> None:
        """Report ``done`` steps if another tenth is complete."""
        if done >= self._next or done == self._total:
            self._emit(f"  {self._label}: {done}/{self._total}")
            self._next = done + max(1, self._total // 10)


class Paired:
    """PicoBot and baseline samples taken alternately, on the same iteration.

    Iteration ``i`` times both sides, PicoBot first on even ``i`` and the baseline first
    on odd ones, so drift in the machine or the page cache hits both alike; the first
    ``warmup`` iterations are not recorded.
    """

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.pico_ns: list[int] = []
        self.raw_ns: list[int] = []

    async def measure(
        self, i: int, pico: Callable[[], Awaitable[P]], raw: Callable[[], R]
    ) -> tuple[P, R]:
        """Run and time both sides once; their results."""
        record = i >= self.warmup
        if i % 2:
            raw_result = self._timed(raw, record)
        start = now_ns()
        pico_result = await pico()
        if record:
            self.pico_ns.append(now_ns() - start)
        if not i % 2:
            raw_result = self._timed(raw, record)
        return pico_result, raw_result

    def _timed(self, raw: Callable[[], R], record: bool) -> R:
        start = now_ns()
        result = raw()
        if record:
            self.raw_ns.append(now_ns() - start)
        return result

    def summary(self) -> dict[str, Any]:
        """Both distributions and the p50/p95/p99 ratios, PicoBot over baseline."""
        pico, base = dist_ms(self.pico_ns), dist_ms(self.raw_ns)
        return {
            "picobot_ms": pico,
            "raw_ms": base,
            "p50_ratio": ratio(pico["p50"], base["p50"]),
            "p95_ratio": ratio(pico["p95"], base["p95"]),
            "p99_ratio": ratio(pico["p99"], base["p99"]),
        }
