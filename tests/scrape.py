"""Reading a metrics exposition back with prometheus_client's own parsers, for tests.

:func:`parse_exposition` turns the text into ``{(sample name, labels): value}`` so a
test can assert on one series; a line the parser refuses fails the test.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from picobot.metrics import METRICS

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_exposition(text: str, *, openmetrics: bool = False) -> Samples:
    """Every sample of ``text`` (Prometheus text format, or OpenMetrics) by name and labels."""
    parse = openmetrics_families if openmetrics else text_string_to_metric_families
    samples: Samples = {}
    for family in parse(text):
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in samples, f"duplicate sample {key}"
            samples[key] = s.value
    return samples


def sample(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (KeyError if absent)."""
    return samples[(name, frozenset(labels.items()))]


def scrape(*collectors: Collector) -> Samples:
    """What ``collectors`` expose, through a registry of their own, parsed back."""
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    return parse_exposition(generate_latest(registry).decode())


def metric_value(name: str, **labels: str) -> float:
    """A sample of the process's own metrics (:data:`picobot.metrics.METRICS`); 0 if none."""
    return scrape(METRICS).get((name, frozenset(labels.items())), 0.0)
