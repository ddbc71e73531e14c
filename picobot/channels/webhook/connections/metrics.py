"""The outbound connections' state as Prometheus metrics (on the admin API's /metrics)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from picobot.channels.webhook.connections.base import ConnectionStatus


class ConnectionMetrics:
    """A prometheus_client collector reading each outbound connection's status."""

    def __init__(self, statuses: Sequence[ConnectionStatus]) -> None:
        self._statuses = list(statuses)

    def collect(self) -> Iterable[Metric]:
        """Connected or not, the time of the last update, the errors, per channel."""
        up = GaugeMetricFamily(
            "picobot_channel_connected",
            "1 while an outbound connection (Telegram long polling, Slack Socket Mode)"
            " is connected, else 0.",
            labels=["channel", "mode"],
        )
        last = GaugeMetricFamily(
            "picobot_channel_last_update_timestamp_seconds",
            "When an outbound connection last received an update (Unix time); absent"
            " until the first one.",
            labels=["channel", "mode"],
        )
        errors = CounterMetricFamily(
            "picobot_channel_connection_errors",
            "Errors of an outbound connection since the start (each is retried with backoff).",
            labels=["channel", "mode"],
        )
        for status in self._statuses:
            labels = [status.channel, status.mode]
            up.add_metric(labels, 1.0 if status.connected else 0.0)
            if status.last_update_at is not None:
                last.add_metric(labels, status.last_update_at)
            errors.add_metric(labels, status.errors)
        return [up, last, errors]
