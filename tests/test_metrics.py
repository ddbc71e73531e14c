"""The metrics registry and its Prometheus text exposition (checked by a strict parser)."""

from __future__ import annotations

import math
import re

import pytest

from picobot.metrics import (
    Counter,
    Gauge,
    Histogram,
    PicobotMetrics,
    Registry,
    escape_label_value,
    format_value,
    observe_purge,
    observe_retention,
    observe_turn,
)
from tests.admin.exposition import parse_exposition, sample


async def test_counter_with_labels_renders_each_series() -> None:
    registry = Registry()
    turns = registry.register(Counter("t_total", "Turns.", ["channel"]))
    turns.inc(channel="ws")
    turns.inc(2, channel="ws")
    turns.inc(channel="tui")
    text = await registry.render()
    samples = parse_exposition(text)
    assert sample(samples, "t_total", channel="ws") == 3
    assert sample(samples, "t_total", channel="tui") == 1
    assert "# TYPE t_total counter" in text
    assert turns.value(channel="ws") == 3


async def test_unlabelled_metrics_start_at_zero() -> None:
    registry = Registry()
    registry.register(Counter("errors_total", "Errors."))
    registry.register(Gauge("depth", "Depth."))
    samples = parse_exposition(await registry.render())
    assert sample(samples, "errors_total") == 0
    assert sample(samples, "depth") == 0


async def test_labelled_metric_without_series_renders_only_its_header() -> None:
    registry = Registry()
    registry.register(Counter("req_total", "Requests.", ["status"]))
    text = await registry.render()
    assert text == "# HELP req_total Requests.\n# TYPE req_total counter\n"


def test_wrong_labels_and_negative_increments_are_refused() -> None:
    counter = Counter("c_total", "C.", ["a"])
    with pytest.raises(ValueError, match="takes labels"):
        counter.inc(b="x")
    with pytest.raises(ValueError, match="takes labels"):
        counter.inc()
    with pytest.raises(ValueError, match="cannot decrease"):
        counter.inc(-1, a="x")


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "a b"])
def test_invalid_metric_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid metric name"):
        Counter(name, "x")


@pytest.mark.parametrize("labels", [["__reserved"], ["a-b"], ["a", "a"]])
def test_invalid_label_names_are_refused(labels: list[str]) -> None:
    with pytest.raises(ValueError):
        Counter("ok_total", "x", labels)


def test_duplicate_registration_is_refused() -> None:
    registry = Registry()
    registry.register(Counter("x_total", "x"))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Gauge("x_total", "x"))


async def test_label_values_and_help_are_escaped() -> None:
    registry = Registry()
    counter = registry.register(Counter("esc_total", 'Help with \\ and\nnewline "q".', ["v"]))
    nasty = 'back\\slash "quoted"\nnewline'
    counter.inc(v=nasty)
    text = await registry.render()
    assert '# HELP esc_total Help with \\\\ and\\nnewline "q".' in text
    assert escape_label_value(nasty) == 'back\\\\slash \\"quoted\\"\\nnewline'
    samples = parse_exposition(text)
    assert sample(samples, "esc_total", v=nasty) == 1


async def test_histogram_buckets_are_cumulative_with_inf_sum_and_count() -> None:
    registry = Registry()
    hist = registry.register(Histogram("lat_seconds", "Latency.", buckets=[1.0, 0.1, 10.0]))
    for value in (0.05, 0.1, 0.5, 3.0, 50.0):
        hist.observe(value)
    text = await registry.render()
    samples = parse_exposition(text)
    assert sample(samples, "lat_seconds_bucket", le="0.1") == 2  # le is inclusive
    assert sample(samples, "lat_seconds_bucket", le="1.0") == 3
    assert sample(samples, "lat_seconds_bucket", le="10.0") == 4
    assert sample(samples, "lat_seconds_bucket", le="+Inf") == 5
    assert sample(samples, "lat_seconds_count") == 5
    assert sample(samples, "lat_seconds_sum") == pytest.approx(53.65)
    # Buckets are rendered in increasing order, +Inf last.
    les = re.findall(r'le="([^"]+)"', text)
    assert les == ["0.1", "1.0", "10.0", "+Inf"]
    assert hist.count() == 5


def test_histogram_refuses_le_label_and_empty_buckets() -> None:
    with pytest.raises(ValueError, match="reserved"):
        Histogram("h", "h", ["le"])
    with pytest.raises(ValueError, match="buckets"):
        Histogram("h", "h", buckets=[math.inf])
    with pytest.raises(ValueError, match="buckets"):
        Histogram("h", "h", buckets=[1.0, 1.0])


async def test_gauge_callbacks_sync_async_none_and_failing() -> None:
    registry = Registry()
    sync = registry.register(Gauge("sync_g", "Sync.", callback=lambda: 7))

    async def depth() -> float:
        return 3

    registry.register(Gauge("async_g", "Async.", callback=depth))
    registry.register(Gauge("none_g", "Nothing now.", callback=lambda: None))

    def broken() -> float:
        raise RuntimeError("source down")

    registry.register(Gauge("broken_g", "Broken.", callback=broken))
    samples = parse_exposition(await registry.render())
    assert sample(samples, "sync_g") == 7
    assert sample(samples, "async_g") == 3
    # No value now and a failing source both mean no sample; the scrape still works.
    assert not any(name in ("none_g", "broken_g") for name, _ in samples)
    assert sync.value() == 7
    sync.set_callback(None)
    sync.set(2)
    assert sample(parse_exposition(await registry.render()), "sync_g") == 2


def test_labelled_gauge_takes_no_callback() -> None:
    with pytest.raises(ValueError, match="unlabelled"):
        Gauge("g", "g", ["a"], callback=lambda: 1)


@pytest.mark.parametrize(
    ("value", "text"),
    [(math.inf, "+Inf"), (-math.inf, "-Inf"), (math.nan, "NaN"), (3, "3.0"), (0.25, "0.25")],
)
def test_format_value(value: float, text: str) -> None:
    assert format_value(value) == text


async def test_picobot_metrics_render_and_helpers_move_them() -> None:
    metrics = PicobotMetrics()
    before = parse_exposition(await metrics.render())
    names = {name for name, _ in before}
    for expected in (
        "picobot_llm_errors_total",
        "picobot_turn_seconds_count",
        "picobot_retention_last_run_timestamp",
        "picobot_retention_last_deleted_rows",
        "picobot_outbound_queue_depth",
    ):
        assert expected in names
    observe_turn("ws", 0.3, metrics=metrics)
    observe_turn("ws", 2.0, metrics=metrics)
    observe_purge("user", metrics=metrics)
    observe_retention(1_700_000_000.0, 42, metrics=metrics)
    metrics.llm_errors.inc()
    metrics.webhook_requests.inc(platform="telegram", status="200")
    after = parse_exposition(await metrics.render())
    assert sample(after, "picobot_turns_total", channel="ws") == 2
    assert sample(after, "picobot_turn_seconds_count") == 2
    assert sample(after, "picobot_turn_seconds_bucket", le="0.5") == 1
    assert sample(after, "picobot_purges_total", scope="user") == 1
    assert sample(after, "picobot_retention_last_run_timestamp") == 1_700_000_000.0
    assert sample(after, "picobot_retention_last_deleted_rows") == 42
    assert sample(after, "picobot_retention_last_run_ok") == 1
    assert sample(after, "picobot_llm_errors_total") == 1
    assert sample(after, "picobot_webhook_requests_total", platform="telegram", status="200") == 1


def test_failed_retention_keeps_the_last_deleted_count() -> None:
    metrics = PicobotMetrics()
    observe_retention(100.0, 5, metrics=metrics)
    observe_retention(200.0, 0, ok=False, metrics=metrics)
    assert metrics.retention_last_run_timestamp.value() == 200.0
    assert metrics.retention_last_run_ok.value() == 0
    assert metrics.retention_last_deleted_rows.value() == 5


def test_parser_rejects_malformed_lines() -> None:
    for bad in (
        "metric value\n",
        'm{a="unterminated} 1\n',
        'm{a="x"} 1_000\n',
        '# TYPE m counter\nm{a="bad\\q"} 1\n',
        "m 1\n",  # a sample before its TYPE
        "# TYPE m counter\n# TYPE m counter\n",
        "# TYPE m counter\nm 1",  # no final line feed
    ):
        with pytest.raises(AssertionError):
            parse_exposition(bad)
