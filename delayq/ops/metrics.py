"""Prometheus text exposition: counters and histograms that every run adds to in Redis
(store/tallies.py), the queues' gauges, and the last run's own figures when there is one.

This module owns the metric names. It reads only what stays cheap at any table size: the
tallies' hashes, ZCARD/ZCOUNT/the head of each schedule, and the running rows through the
status index — never a GROUP BY over the whole table. Writing the file is textfile.py's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from ..store import queries
from ..store.index import Index
from ..store.table import Table
from ..store.tallies import (
    DURATION_BOUNDS,
    LATENESS_BOUNDS,
    OUTCOMES,
    SEPARATOR,
    bucket_field,
)
from ..worker.report import RunReport

LABELS = ["queue", "handler"]
RUN_OUTCOMES = ("claimed", "succeeded", "failed", "retried", "missed")


@dataclass(frozen=True)
class QueueGauges:
    scheduled: int  # entries on the schedule: pending jobs
    due: int  # of those, already due
    running: int
    oldest_due_age: float  # seconds the longest-due entry has waited; 0 when none is due


def exposition(table: Table, index: Index, now: float, report: RunReport | None = None) -> bytes:
    """The whole exposition, in the text format, from a registry of its own."""
    names = index.registry.known_queues()
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Tallies(index.tallies.counters(names)))
    registry.register(_Queues(queue_gauges(table, index, names, now)))
    if report is not None:
        registry.register(_LastRun(report, now))
    return generate_latest(registry)


def queue_gauges(
    table: Table, index: Index, names: list[str], now: float
) -> dict[str, QueueGauges]:
    """Each queue's gauges: one Redis round trip and one indexed query."""
    running = queries.running_by_queue(table)
    return {
        name: QueueGauges(size, due, running.get(name, 0), _age(head, now))
        for name, (size, due, head) in index.schedule.backlog(names, now).items()
    }


def _age(head: float | None, now: float) -> float:
    return 0.0 if head is None or head > now else now - head


class _Tallies(Collector):
    """The counters and histograms summed over every run, by queue and handler."""

    def __init__(self, counters: Mapping[str, Mapping[str, float]]) -> None:
        # {(queue, handler): {metric: value}}
        self.series: dict[tuple[str, str], dict[str, float]] = {}
        for queue, fields in counters.items():
            for name, value in fields.items():
                metric, _, handler = name.partition(SEPARATOR)
                self.series.setdefault((queue, handler), {})[metric] = value

    def collect(self) -> Iterable[CounterMetricFamily | HistogramMetricFamily]:
        for outcome in ("processed", *OUTCOMES):
            family = CounterMetricFamily(
                f"delayq_jobs_{outcome}", _COUNTER_HELP[outcome], labels=LABELS
            )
            for labels, values in sorted(self.series.items()):
                family.add_metric(list(labels), _count(values, outcome))
            yield family
        yield self._histogram("lateness", LATENESS_BOUNDS, "from a job's due time to its start")
        yield self._histogram("duration", DURATION_BOUNDS, "a handler ran (wall time)")

    def _histogram(self, name: str, bounds: tuple[float, ...], what: str) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            f"delayq_job_{name}_seconds", f"Seconds {what}, over every run.", labels=LABELS
        )
        for labels, values in sorted(self.series.items()):
            cumulative, buckets = 0.0, []
            for position, bound in enumerate(bounds):
                cumulative += values.get(bucket_field(name, position), 0.0)
                buckets.append(("+Inf" if math.isinf(bound) else repr(float(bound)), cumulative))
            if cumulative:
                family.add_metric(list(labels), buckets, values.get(f"{name}_sum", 0.0))
        return family


_COUNTER_HELP = {
    "processed": "Jobs whose handler ran to an outcome (succeeded + failed).",
    "succeeded": "Jobs whose handler returned.",
    "failed": "Jobs whose handler failed (retried ones included).",
    "retried": "Failed jobs that were given a retry.",
    "missed": "Jobs due longer ago than --since, marked missed instead of run.",
}


def _count(values: Mapping[str, float], outcome: str) -> float:
    if outcome == "processed":
        return values.get("succeeded", 0.0) + values.get("failed", 0.0)
    return values.get(outcome, 0.0)


class _Queues(Collector):
    def __init__(self, gauges: Mapping[str, QueueGauges]) -> None:
        self.gauges = gauges

    def collect(self) -> Iterable[GaugeMetricFamily]:
        for name, field, text in (
            ("delayq_pending_jobs", "scheduled", "Jobs on the schedule, due or not."),
            ("delayq_backlog_jobs", "due", "Pending jobs already due."),
            ("delayq_running_jobs", "running", "Jobs whose handler a run holds."),
            (
                "delayq_oldest_due_age_seconds",
                "oldest_due_age",
                "How long the oldest due pending job has waited (0: none is due).",
            ),
        ):
            family = GaugeMetricFamily(name, f"{text} Per queue.", labels=["queue"])
            for queue, gauges in self.gauges.items():
                family.add_metric([queue], getattr(gauges, field))
            yield family


class _LastRun(Collector):
    """What the run that writes the file did (the totals of a --loop run so far)."""

    def __init__(self, report: RunReport, now: float) -> None:
        self.report = report
        self.now = now

    def collect(self) -> Iterable[GaugeMetricFamily]:
        jobs = GaugeMetricFamily(
            "delayq_last_run_jobs", "Jobs the last run handled, by outcome.", labels=["outcome"]
        )
        for outcome in RUN_OUTCOMES:
            jobs.add_metric([outcome], getattr(self.report, outcome))
        yield jobs
        yield GaugeMetricFamily(
            "delayq_last_run_duration_seconds", "How long the last run took.", self.report.elapsed
        )
        yield GaugeMetricFamily(
            "delayq_last_run_timestamp_seconds", "When the last run ended.", self.now
        )
