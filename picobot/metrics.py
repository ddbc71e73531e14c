"""A tiny, dependency-free metrics registry rendered in the Prometheus text format.

Three kinds, as in the Prometheus data model: :class:`Counter` (only goes up),
:class:`Gauge` (set directly, or read from a callback at scrape time) and
:class:`Histogram` (fixed buckets, cumulative ``_bucket{le=...}``, ``_sum``,
``_count``). Label names are fixed when a metric is created and every observation
must name exactly those labels, so a typo fails loudly instead of creating a new
series. Label values must come from bounded sets (channel names, platforms, status
codes): never put user ids or message text in a label.

:data:`METRICS` is the process-wide default that the kernel, the privacy controller,
the tasks and the HTTP server update and that ``GET /metrics`` renders; tests build a
fresh :class:`PicobotMetrics` when they need isolation. Format reference:
https://prometheus.io/docs/instrumenting/exposition_formats/ (version 0.0.4).
"""

from __future__ import annotations

import inspect
import logging
import math
import re
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TypeVar

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Content-Type of :meth:`Registry.render` output."""

DEFAULT_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Seconds; chat turns run from tens of milliseconds (commands) to minutes (slow models)."""

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

LabelValues = tuple[str, ...]
GaugeCallback = Callable[[], float | Awaitable[float | None] | None]
"""A gauge's scrape-time source; may be async. None means "no value now" (no sample)."""


def format_value(value: float) -> str:
    """A sample value as Prometheus expects it (``+Inf``, ``-Inf``, ``NaN`` spelled out)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def escape_label_value(value: str) -> str:
    """Escape a label value: backslash, double quote and line feed."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """Escape HELP text: backslash and line feed (quotes are literal there)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels_text(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    pairs = ",".join(f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values, strict=True))
    return "{" + pairs + "}"


class Metric:
    """What every metric shares: a name, a help text, fixed label names."""

    kind = "untyped"

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> None:
        if not _NAME_RE.fullmatch(name):
            raise ValueError(f"invalid metric name {name!r}")
        for label in labelnames:
            if not _LABEL_RE.fullmatch(label) or label.startswith("__"):
                raise ValueError(f"invalid label name {label!r} in {name}")
        if len(set(labelnames)) != len(labelnames):
            raise ValueError(f"duplicate label names in {name}")
        self.name = name
        self.help = help_text
        self.labelnames = tuple(labelnames)
        # Observations may come from worker threads (a local model runs in one).
        self._lock = threading.Lock()

    def _key(self, labels: Mapping[str, str]) -> LabelValues:
        if set(labels) != set(self.labelnames):
            raise ValueError(
                f"{self.name} takes labels {sorted(self.labelnames)}, got {sorted(labels)}"
            )
        return tuple(str(labels[n]) for n in self.labelnames)

    def header(self) -> list[str]:
        """The ``# HELP`` and ``# TYPE`` lines."""
        return [f"# HELP {self.name} {escape_help(self.help)}", f"# TYPE {self.name} {self.kind}"]

    def samples(self) -> Iterator[str]:
        """Sample lines; subclasses implement."""
        raise NotImplementedError


class Counter(Metric):
    """A value that only goes up (requests, errors); ``rate()`` makes sense of it."""

    kind = "counter"

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labelnames)
        # An unlabelled counter exists at 0 from the start, so rate() has a baseline.
        self._values: dict[LabelValues, float] = {} if labelnames else {(): 0.0}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        """Add ``amount`` (>= 0) to the series named by ``labels``."""
        if amount < 0:
            raise ValueError(f"{self.name}: a counter cannot decrease")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        """The current value of one series (0 if never incremented)."""
        return self._values.get(self._key(labels), 0.0)

    def samples(self) -> Iterator[str]:
        """One line per series."""
        with self._lock:
            items = sorted(self._values.items())
        for key, value in items:
            yield f"{self.name}{_labels_text(self.labelnames, key)} {format_value(value)}"


class Gauge(Metric):
    """A value that goes up and down; set it, or give it a callback read at scrape time.

    Only unlabelled gauges take a callback (the callback is the gauge's one series).
    """

    kind = "gauge"

    def __init__(
        self,
        name: str,
        help_text: str,
        labelnames: Sequence[str] = (),
        *,
        callback: GaugeCallback | None = None,
    ) -> None:
        super().__init__(name, help_text, labelnames)
        self._values: dict[LabelValues, float] = {} if labelnames else {(): 0.0}
        self._callback: GaugeCallback | None = None
        self.set_callback(callback)

    def set(self, value: float, **labels: str) -> None:
        """Set the series named by ``labels`` to ``value``."""
        key = self._key(labels)
        with self._lock:
            self._values[key] = float(value)

    def value(self, **labels: str) -> float:
        """The last set value of one series (0 if never set; callbacks are not run)."""
        return self._values.get(self._key(labels), 0.0)

    def set_callback(self, callback: GaugeCallback | None) -> None:
        """Read the value from ``callback`` at each scrape (None: back to set values)."""
        if callback is not None and self.labelnames:
            raise ValueError(f"{self.name}: only an unlabelled gauge takes a callback")
        self._callback = callback

    async def refresh(self) -> bool:
        """Run the callback, if any, and store its value; False if there is none now.

        A failing callback is logged and yields no sample: a scrape must not fail (and
        hide every other metric) because one source is down.
        """
        if self._callback is None:
            return True
        try:
            result = self._callback()
            if inspect.isawaitable(result):
                result = await result
        except Exception:
            log.exception("metrics callback of %s failed", self.name)
            return False
        if result is None:
            return False
        self.set(float(result))
        return True

    def samples(self) -> Iterator[str]:
        """One line per series."""
        with self._lock:
            items = sorted(self._values.items())
        for key, value in items:
            yield f"{self.name}{_labels_text(self.labelnames, key)} {format_value(value)}"


class Histogram(Metric):
    """Observations counted into fixed cumulative buckets, with their sum and count."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        help_text: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        if "le" in labelnames:
            raise ValueError(f"{name}: 'le' is reserved for histogram buckets")
        bounds = sorted(float(b) for b in buckets if not math.isinf(b))
        if not bounds or len(set(bounds)) != len(bounds):
            raise ValueError(f"{name}: buckets must be distinct and not empty")
        super().__init__(name, help_text, labelnames)
        self.buckets: tuple[float, ...] = (*bounds, math.inf)
        # Per series: per-bucket (non-cumulative) counts, sum, count.
        self._series: dict[LabelValues, tuple[list[int], list[float]]] = {}
        if not labelnames:
            self._series[()] = ([0] * len(self.buckets), [0.0, 0.0])

    def observe(self, value: float, **labels: str) -> None:
        """Record one observation in the series named by ``labels``."""
        key = self._key(labels)
        with self._lock:
            counts, totals = self._series.setdefault(key, ([0] * len(self.buckets), [0.0, 0.0]))
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    counts[i] += 1
                    break
            totals[0] += value
            totals[1] += 1

    def count(self, **labels: str) -> int:
        """How many observations one series holds."""
        series = self._series.get(self._key(labels))
        return 0 if series is None else int(series[1][1])

    def samples(self) -> Iterator[str]:
        """``_bucket`` lines (cumulative, ``+Inf`` last), then ``_sum`` and ``_count``."""
        with self._lock:
            items = sorted((k, (list(c), list(t))) for k, (c, t) in self._series.items())
        names = (*self.labelnames, "le")
        for key, (counts, (total, count)) in items:
            running = 0
            for bound, n in zip(self.buckets, counts, strict=True):
                running += n
                labels = _labels_text(names, (*key, format_value(bound)))
                yield f"{self.name}_bucket{labels} {format_value(running)}"
            plain = _labels_text(self.labelnames, key)
            yield f"{self.name}_sum{plain} {format_value(total)}"
            yield f"{self.name}_count{plain} {format_value(count)}"


M = TypeVar("M", bound=Metric)


class Registry:
    """A set of metrics with unique names, rendered together."""

    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}

    def register(self, metric: M) -> M:
        """Add ``metric``; raises ValueError if its name is taken."""
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name} is already registered")
        self._metrics[metric.name] = metric
        return metric

    def get(self, name: str) -> Metric:
        """A registered metric by name (KeyError if there is none)."""
        return self._metrics[name]

    async def render(self) -> str:
        """The whole registry in the text exposition format (callbacks run first)."""
        lines: list[str] = []
        for metric in self._metrics.values():
            lines += metric.header()
            if isinstance(metric, Gauge) and not await metric.refresh():
                continue
            lines += metric.samples()
        return "\n".join(lines) + "\n"


class PicobotMetrics(Registry):
    """The metrics PicoBot exports; :data:`METRICS` is the process-wide instance."""

    def __init__(self, *, turn_buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        super().__init__()
        self.turns = self.register(
            Counter("picobot_turns_total", "Chat turns answered, by channel.", ["channel"])
        )
        self.turn_seconds = self.register(
            Histogram(
                "picobot_turn_seconds",
                "Wall time of a chat turn, from the stored message to the stored reply.",
                buckets=turn_buckets,
            )
        )
        self.llm_errors = self.register(
            Counter("picobot_llm_errors_total", "Turns that failed because the model failed.")
        )
        self.purges = self.register(
            Counter(
                "picobot_purges_total",
                "Confirmed purges executed, by scope (session, user, older_than).",
                ["scope"],
            )
        )
        self.retention_last_run_timestamp = self.register(
            Gauge(
                "picobot_retention_last_run_timestamp",
                "Unix time when the last retention run finished (0 = never).",
            )
        )
        self.retention_last_run_ok = self.register(
            Gauge(
                "picobot_retention_last_run_ok",
                "1 if the last finished retention run succeeded, 0 if it failed or never ran.",
            )
        )
        self.retention_last_deleted_rows = self.register(
            Gauge(
                "picobot_retention_last_deleted_rows",
                "Rows deleted by the last retention run of this process.",
            )
        )
        self.outbound_queue_depth = self.register(
            Gauge(
                "picobot_outbound_queue_depth",
                "Platform replies waiting to be delivered (webhook outbound queue).",
            )
        )
        self.webhook_requests = self.register(
            Counter(
                "picobot_webhook_requests_total",
                "Webhook HTTP requests, by platform and response status.",
                ["platform", "status"],
            )
        )


METRICS = PicobotMetrics()
"""The process-wide metrics; see the module docstring."""


def observe_turn(channel: str, seconds: float, *, metrics: PicobotMetrics = METRICS) -> None:
    """Count one answered turn of ``channel`` and record how long it took."""
    metrics.turns.inc(channel=channel)
    metrics.turn_seconds.observe(seconds)


def observe_purge(scope: str, *, metrics: PicobotMetrics = METRICS) -> None:
    """Count one executed purge (``scope`` is ``session``, ``user`` or ``older_than``)."""
    metrics.purges.inc(scope=scope)


def observe_retention(
    finished_at: float, deleted_rows: int, *, ok: bool = True, metrics: PicobotMetrics = METRICS
) -> None:
    """Record the outcome of a retention run of this process."""
    metrics.retention_last_run_timestamp.set(finished_at)
    metrics.retention_last_run_ok.set(1.0 if ok else 0.0)
    if ok:
        metrics.retention_last_deleted_rows.set(deleted_rows)
