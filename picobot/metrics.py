"""PicoBot's own metrics, kept by prometheus_client; ``GET /metrics`` serves them.

:data:`METRICS` holds what the kernel, the privacy controller, the tasks and the
webhook middleware count in this process (turns, their duration, model failures,
purges, retention runs, webhook requests). Label values come from bounded sets
(channel names, platforms, status codes, purge scopes): never a user id or text.

Each server that exposes metrics builds its own registry with
:func:`server_registry`: the process, GC and platform collectors of prometheus_client,
:data:`METRICS`, and collectors of its own (queue depths, webhook counters, jobs).
:func:`render` picks the format from the request's ``Accept`` header: OpenMetrics
when asked for, else the Prometheus text format 0.0.4. Tests build a fresh
:class:`PicobotMetrics` when they need isolation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import prometheus_client
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

# A `_created` series per counter and histogram doubles the series in the text format,
# where Prometheus stores it as one more gauge that nobody queries.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped upstream

DEFAULT_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Seconds; chat turns run from tens of milliseconds (commands) to minutes (slow models)."""


class PicobotMetrics:
    """The metrics PicoBot updates as it works; a prometheus_client collector.

    Counters, gauges and histograms are prometheus_client's own, unregistered: a
    server adds the whole set to its registry (:func:`server_registry`).
    """

    def __init__(self, *, turn_buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        self.turns = Counter(
            "picobot_turns_total", "Chat turns answered, by channel.", ["channel"], registry=None
        )
        self.turn_seconds = Histogram(
            "picobot_turn_seconds",
            "Wall time of a chat turn, from the stored message to the stored reply.",
            buckets=turn_buckets,
            registry=None,
        )
        self.llm_errors = Counter(
            "picobot_llm_errors_total", "Turns that failed because the model failed.", registry=None
        )
        self.llm_prompt_tokens = Counter(
            "picobot_llm_prompt_tokens_total",
            "Prompt tokens the model server reported, by provider.",
            ["provider"],
            registry=None,
        )
        self.llm_cached_prompt_tokens = Counter(
            "picobot_llm_cached_prompt_tokens_total",
            "Of those, the tokens the server read from its prompt cache, by provider.",
            ["provider"],
            registry=None,
        )
        self.purges = Counter(
            "picobot_purges_total",
            "Confirmed purges executed, by scope (session, user, older_than, facts, messages).",
            ["scope"],
            registry=None,
        )
        self.retention_last_run_timestamp = Gauge(
            "picobot_retention_last_run_timestamp_seconds",
            "Unix time when the last retention run finished (0 = never).",
            registry=None,
        )
        self.retention_last_run_ok = Gauge(
            "picobot_retention_last_run_ok",
            "1 if the last finished retention run succeeded, 0 if it failed or never ran.",
            registry=None,
        )
        self.retention_last_deleted_rows = Gauge(
            "picobot_retention_last_deleted_rows",
            "Rows deleted by the last retention run of this process.",
            registry=None,
        )
        self.webhook_requests = Counter(
            "picobot_webhook_requests_total",
            "Webhook HTTP requests, by platform and response status.",
            ["platform", "status"],
            registry=None,
        )
        self._all: tuple[Counter | Gauge | Histogram, ...] = (
            self.turns,
            self.turn_seconds,
            self.llm_errors,
            self.llm_prompt_tokens,
            self.llm_cached_prompt_tokens,
            self.purges,
            self.retention_last_run_timestamp,
            self.retention_last_run_ok,
            self.retention_last_deleted_rows,
            self.webhook_requests,
        )

    def describe(self) -> Iterable[Metric]:
        """The families, without values (lets a registry refuse a clashing name)."""
        for metric in self._all:
            yield from metric.describe()

    def collect(self) -> Iterable[Metric]:
        """Every family with its current values."""
        for metric in self._all:
            yield from metric.collect()


METRICS = PicobotMetrics()
"""The process-wide metrics; see the module docstring."""


def server_registry(*collectors: Collector) -> CollectorRegistry:
    """A new registry for one server: process, GC and platform metrics plus ``collectors``.

    Never prometheus_client's global default registry: each server (and each test)
    renders exactly what it registered. A name registered twice raises ValueError.
    """
    # Auto-described: a collector without describe() is collected once to learn its names.
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    for collector in collectors:
        registry.register(collector)
    return registry


def render(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """The exposition of ``registry`` and its Content-Type, as ``accept`` asks.

    ``application/openmetrics-text`` gets OpenMetrics; anything else, or nothing, the
    Prometheus text format 0.0.4 (what every Prometheus server reads).
    """
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


def observe_turn(channel: str, seconds: float, *, metrics: PicobotMetrics = METRICS) -> None:
    """Count one answered turn of ``channel`` and record how long it took."""
    metrics.turns.labels(channel=channel).inc()
    metrics.turn_seconds.observe(seconds)


def observe_prompt_tokens(
    provider: str, prompt: int, cached: int, *, metrics: PicobotMetrics = METRICS
) -> None:
    """Count what a model server reported for one call: prompt tokens, the cached part."""
    metrics.llm_prompt_tokens.labels(provider=provider).inc(max(0, prompt))
    metrics.llm_cached_prompt_tokens.labels(provider=provider).inc(max(0, min(cached, prompt)))


def observe_purge(scope: str, *, metrics: PicobotMetrics = METRICS) -> None:
    """Count one executed purge; ``scope``: session, user, older_than, facts or messages."""
    metrics.purges.labels(scope=scope).inc()


def observe_retention(
    finished_at: float, deleted_rows: int, *, ok: bool = True, metrics: PicobotMetrics = METRICS
) -> None:
    """Record the outcome of a retention run of this process."""
    metrics.retention_last_run_timestamp.set(finished_at)
    metrics.retention_last_run_ok.set(1.0 if ok else 0.0)
    if ok:
        metrics.retention_last_deleted_rows.set(deleted_rows)
