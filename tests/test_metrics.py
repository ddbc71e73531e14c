"""PicoBot's metrics on prometheus_client: names, helpers, server registries, formats."""

from __future__ import annotations

import pytest
from prometheus_client import Counter

from picobot.metrics import (
    PicobotMetrics,
    observe_purge,
    observe_retention,
    observe_turn,
    render,
    server_registry,
)
from tests.scrape import parse_exposition, sample, scrape


def test_every_metric_exists_from_the_start() -> None:
    samples = scrape(PicobotMetrics())
    for unlabelled in (
        "picobot_llm_errors_total",
        "picobot_turn_seconds_count",
        "picobot_retention_last_run_timestamp_seconds",
        "picobot_retention_last_run_ok",
        "picobot_retention_last_deleted_rows",
    ):
        assert sample(samples, unlabelled) == 0
    # No `_created` series: they would double the series of the text format.
    assert not any(name.endswith("_created") for name, _ in samples)


def test_helpers_move_their_metrics() -> None:
    metrics = PicobotMetrics()
    observe_turn("ws", 0.3, metrics=metrics)
    observe_turn("ws", 2.0, metrics=metrics)
    observe_purge("user", metrics=metrics)
    observe_retention(1_700_000_000.0, 42, metrics=metrics)
    metrics.llm_errors.inc()
    metrics.webhook_requests.labels(platform="telegram", status="200").inc()
    after = scrape(metrics)
    assert sample(after, "picobot_turns_total", channel="ws") == 2
    assert sample(after, "picobot_turn_seconds_count") == 2
    assert sample(after, "picobot_turn_seconds_bucket", le="0.5") == 1
    assert sample(after, "picobot_turn_seconds_bucket", le="+Inf") == 2
    assert sample(after, "picobot_turn_seconds_sum") == pytest.approx(2.3)
    assert sample(after, "picobot_purges_total", scope="user") == 1
    assert sample(after, "picobot_retention_last_run_timestamp_seconds") == 1_700_000_000.0
    assert sample(after, "picobot_retention_last_deleted_rows") == 42
    assert sample(after, "picobot_retention_last_run_ok") == 1
    assert sample(after, "picobot_llm_errors_total") == 1
    assert sample(after, "picobot_webhook_requests_total", platform="telegram", status="200") == 1


def test_failed_retention_keeps_the_last_deleted_count() -> None:
    metrics = PicobotMetrics()
    observe_retention(100.0, 5, metrics=metrics)
    observe_retention(200.0, 0, ok=False, metrics=metrics)
    after = scrape(metrics)
    assert sample(after, "picobot_retention_last_run_timestamp_seconds") == 200.0
    assert sample(after, "picobot_retention_last_run_ok") == 0
    assert sample(after, "picobot_retention_last_deleted_rows") == 5


def test_custom_buckets_are_used() -> None:
    metrics = PicobotMetrics(turn_buckets=(1.0, 10.0))
    observe_turn("tui", 5.0, metrics=metrics)
    samples = scrape(metrics)
    assert sample(samples, "picobot_turn_seconds_bucket", le="1.0") == 0
    assert sample(samples, "picobot_turn_seconds_bucket", le="10.0") == 1
    assert ("picobot_turn_seconds_bucket", frozenset({("le", "0.5")})) not in samples


def test_a_server_registry_adds_process_gc_and_platform_metrics() -> None:
    text, content_type = render(server_registry(PicobotMetrics()), None)
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    names = {name for name, _ in parse_exposition(text.decode())}
    assert {"python_info", "python_gc_collections_total", "process_cpu_seconds_total"} <= names
    assert "picobot_turns_total" not in names  # labelled, and no turn yet
    assert "picobot_llm_errors_total" in names


def test_each_server_registry_is_its_own() -> None:
    first = server_registry(PicobotMetrics())
    second = server_registry(PicobotMetrics())
    assert first is not second
    # A name registered twice in one registry is refused rather than shown twice.
    clash = Counter("picobot_llm_errors_total", "again", registry=None)
    with pytest.raises(ValueError, match="Duplicated"):
        server_registry(PicobotMetrics(), clash)


@pytest.mark.parametrize(
    "accept",
    [
        "application/openmetrics-text",
        "application/openmetrics-text; version=1.0.0",
        "text/plain;q=0.5, application/openmetrics-text;version=1.0.0;q=0.9",
    ],
)
def test_openmetrics_when_asked(accept: str) -> None:
    metrics = PicobotMetrics()
    observe_purge("session", metrics=metrics)
    body, content_type = render(server_registry(metrics), accept)
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    text = body.decode()
    assert text.endswith("# EOF\n")
    samples = parse_exposition(text, openmetrics=True)
    assert sample(samples, "picobot_purges_total", scope="session") == 1


@pytest.mark.parametrize("accept", [None, "", "*/*", "text/plain", "application/json"])
def test_the_text_format_otherwise(accept: str | None) -> None:
    body, content_type = render(server_registry(PicobotMetrics()), accept)
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert "# EOF" not in body.decode()
    assert sample(parse_exposition(body.decode()), "picobot_llm_errors_total") == 0


def test_label_values_are_escaped() -> None:
    metrics = PicobotMetrics()
    nasty = 'back\\slash "quoted"\nnewline'
    metrics.turns.labels(channel=nasty).inc()
    body, _ = render(server_registry(metrics), None)
    assert sample(parse_exposition(body.decode()), "picobot_turns_total", channel=nasty) == 1
