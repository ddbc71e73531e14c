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

    def collect(self) -> Iterable[Metric]:
        """The counters as they are now."""
        s = self._stats
        return [
            _by_outcome(
                "picobot_webhook_messages",
                "Messages in webhook requests, by outcome: accepted into the inbox,"
                " duplicate (a redelivery, skipped), ignored_sender (not allowed).",
                accepted=s.accepted,
                duplicate=s.duplicates,
                ignored_sender=s.ignored_senders,
            ),
            CounterMetricFamily(
                "picobot_webhook_signature_failures",
                "Webhook requests refused because their signature did not verify.",
                value=s.rejected_signature,
            ),
            CounterMetricFamily(
                "picobot_webhook_messages_processed",
                "Accepted webhook messages whose turn has run (answered or apologized for).",
                value=s.processed,
            ),
            _by_outcome(
                "picobot_webhook_deliveries",
                "Reply delivery attempts, by outcome: sent, retry (failed, tried again"
                " later), failed (failed for good: final error or out of attempts).",
                sent=s.delivered,
                retry=s.delivery_retries,
                failed=s.delivery_failures,
            ),
        ]


def _by_outcome(name: str, help_text: str, **counts: int) -> CounterMetricFamily:
    family = CounterMetricFamily(name, help_text, labels=["outcome"])
    for outcome, count in counts.items():
        family.add_metric([outcome], count)
    return family
