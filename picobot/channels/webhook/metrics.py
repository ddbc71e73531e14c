"""The webhook core's counters (:class:`WebhookStats`) as Prometheus metrics.

``picobot serve`` adds a :class:`WebhookMetrics` to the admin API's registry, so
``/metrics`` shows what became of received messages and of reply deliveries.
The counters live in memory and start at 0 with the process, as counters do.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import CounterMetricFamily, Metric

from picobot.channels.webhook.workers import WebhookStats


class WebhookMetrics:
    """A prometheus_client collector reading one webhook server's :class:`WebhookStats`."""

    def __init__(self, stats: WebhookStats) -> None:
        self._stats = stats

    def describe(self) -> Iterable[Metric]:
        """The families, without values."""
        return self._families()

    def collect(self) -> Iterable[Metric]:
        """The counters as they are now."""
        received, signatures, processed, deliveries = self._families()
        s = self._stats
        received.add_metric(["accepted"], s.accepted)
        received.add_metric(["duplicate"], s.duplicates)
        received.add_metric(["ignored_sender"], s.ignored_senders)
        signatures.add_metric([], s.rejected_signature)
        processed.add_metric([], s.processed)
        deliveries.add_metric(["sent"], s.delivered)
        deliveries.add_metric(["retry"], s.delivery_retries)
        deliveries.add_metric(["failed"], s.delivery_failures)
        return [received, signatures, processed, deliveries]

    @staticmethod
    def _families() -> list[CounterMetricFamily]:
        return [
            CounterMetricFamily(
                "picobot_webhook_messages",
                "Messages in webhook requests, by outcome: accepted into the inbox,"
                " duplicate (a redelivery, skipped), ignored_sender (not allowed).",
                labels=["outcome"],
            ),
            CounterMetricFamily(
                "picobot_webhook_signature_failures",
                "Webhook requests refused because their signature did not verify.",
            ),
            CounterMetricFamily(
                "picobot_webhook_messages_processed",
                "Accepted webhook messages whose turn has run (answered or apologized for).",
            ),
            CounterMetricFamily(
                "picobot_webhook_deliveries",
                "Reply delivery attempts, by outcome: sent, retry (failed, tried again"
                " later), failed (failed for good: final error or out of attempts).",
                labels=["outcome"],
            ),
        ]
