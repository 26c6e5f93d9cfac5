"""Prometheus text exposition, and the metric names: counters and histograms that every run
adds to in Redis (store/index/tallies.py), the queues' gauges, and the last run's own figures (or,
outside a run, when the last recorded run ended: what DelayqRunOverdue watches). It
reads only what stays cheap at any table size: the tallies' hashes, ZCARD/ZCOUNT/the head of
each schedule, and the running rows through the status SQL index — never a GROUP BY over the
whole table. Writing the file is textfile.py's."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..store.index import DURATION_BOUNDS, LATENESS_BOUNDS, OUTCOMES, SEPARATOR, Index, bucket_field
from ..store.producers import queues_in_use
from ..store.table import RUNNING, Counts, Jobs, QueueSettings, Table
from ..worker.report import RunReport
from .overview import read_last_run

LABELS = ["queue", "handler"]
RUN_OUTCOMES = ("claimed", "succeeded", "failed", "retried", "missed")
_COUNTER_HELP = {
    "processed": "Jobs whose handler ran to an outcome (succeeded + failed).",
    "succeeded": "Jobs whose handler returned.",
    "failed": "Jobs that failed (retried ones and poison jobs included).",
    "retried": "Failed jobs that were given a retry.",
    "missed": "Jobs due longer ago than --since, marked missed instead of run.",
    "recovered": "Jobs whose run died under them, put back on the schedule by a later run.",
    "poisoned": "Jobs failed for good because the runs holding them kept dying (poison jobs).",
}
_QUEUE_HELP = {
    "delayq_pending_jobs": "Pending jobs in the table, due or not (without the triggers that"
    " keep the counts, the database's estimate beyond 10000 a queue).",
    "delayq_backlog_jobs": "Pending jobs already due.",
    "delayq_running_jobs": "Jobs whose handler a run holds.",
    "delayq_oldest_due_age_seconds": "How long the oldest due pending job has waited"
    " (0: none is due).",
}


def exposition(table: Table, index: Index, now: float, report: RunReport | None = None) -> bytes:
    """The whole exposition, in the text format."""
    names = queues_in_use(table, index)
    families = [*_tallies(index.tallies.counters(names)), *_queues(table, index, names, now)]
    families += _recorded_run(index) if report is None else _last_run(report, now)
    return generate_latest(_Families(families))


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def _tallies(counters: Mapping[str, Mapping[str, float]]) -> Iterator[Metric]:
    """The counters and histograms summed over every run, by queue and handler."""
    series: dict[tuple[str, str], dict[str, float]] = {}  # {(queue, handler): {metric: value}}
    for queue, fields in counters.items():
        for name, value in fields.items():
            metric, _, handler = name.partition(SEPARATOR)
            series.setdefault((queue, handler), {})[metric] = value
    ordered = sorted(series.items())
    for _, values in ordered:
        values["processed"] = values.get("succeeded", 0.0) + values.get("failed", 0.0)
    for outcome in ("processed", *OUTCOMES):
        family = CounterMetricFamily(
            f"delayq_jobs_{outcome}", _COUNTER_HELP[outcome], labels=LABELS
        )
        for labels, values in ordered:
            family.add_metric(list(labels), values.get(outcome, 0.0))
        yield family
    for name, bounds, what in (
        ("lateness", LATENESS_BOUNDS, "from a job's due time to its start"),
        ("duration", DURATION_BOUNDS, "a handler ran (wall time)"),
    ):
        histogram = HistogramMetricFamily(
            f"delayq_job_{name}_seconds", f"Seconds {what}, over every run.", labels=LABELS
        )
        for labels, values in ordered:
            cumulative, buckets = 0.0, []
            for position, bound in enumerate(bounds):
                cumulative += values.get(bucket_field(name, position), 0.0)
                buckets.append(("+Inf" if math.isinf(bound) else repr(float(bound)), cumulative))
            if cumulative:
                histogram.add_metric(list(labels), buckets, values.get(f"{name}_sum", 0.0))
        yield histogram


def _queues(table: Table, index: Index, names: list[str], now: float) -> list[GaugeMetricFamily]:
    """Each queue's gauges: one Redis round trip, the kept pending counts and one indexed
    query."""
    running = Jobs(table).running_by_queue()
    pending = Counts(table).pending_by_queue()
    families = [
        GaugeMetricFamily(name, f"{text} Per queue.", labels=["queue"])
        for name, text in _QUEUE_HELP.items()
    ]
    for queue, (_, due, head) in index.schedule.backlog(names, now).items():
        age = 0.0 if head is None or head > now else now - head
        values = (pending.get(queue, 0), due, running.get(queue, 0), age)
        for family, value in zip(families, values, strict=True):
            family.add_metric([queue], value)
    return [*families, *_flow(table, names)]


def _flow(table: Table, names: list[str]) -> list[GaugeMetricFamily]:
    """Which queues `delayq pause` holds, and since when: a paused queue's backlog grows on
    purpose, which an alert on it may leave out (`unless on(queue) delayq_queue_paused == 1`);
    and the rate limits `delayq limit` set, as starts a second, to set beside the starts, and
    its concurrency limits, to set beside the jobs running."""
    flows = QueueSettings(table).flows()
    paused = GaugeMetricFamily(
        "delayq_queue_paused", "1 while `delayq pause` holds the queue, else 0.", labels=["queue"]
    )
    since = GaugeMetricFamily(
        "delayq_queue_paused_timestamp_seconds",
        "When a paused queue was paused.",
        labels=["queue"],
    )
    rate = GaugeMetricFamily(
        "delayq_queue_rate_limit",
        "The most job starts a second `delayq limit` lets all runners together make (10/m is "
        "0.1667); absent without a limit.",
        labels=["queue"],
    )
    concurrency_limit = GaugeMetricFamily(
        "delayq_queue_concurrency_limit",
        "The most of the queue's jobs `delayq limit` lets all runners together run at once; "
        "absent without a limit.",
        labels=["queue"],
    )
    for queue in sorted(set(names) | set(flows)):
        flow = flows.get(queue, RUNNING)
        paused.add_metric([queue], 1.0 if flow.paused else 0.0)
        if flow.paused_at is not None:
            since.add_metric([queue], flow.paused_at)
        if flow.rate is not None:
            rate.add_metric([queue], flow.rate[0] / flow.rate[1])
        if flow.concurrency is not None:
            concurrency_limit.add_metric([queue], float(flow.concurrency))
    return [paused, since, rate, concurrency_limit]


def _last_run(report: RunReport, now: float) -> list[GaugeMetricFamily]:
    """What the run that writes the file did (the totals of a --loop run so far)."""
    jobs = GaugeMetricFamily(
        "delayq_last_run_jobs", "Jobs the last run handled, by outcome.", labels=["outcome"]
    )
    for outcome in RUN_OUTCOMES:
        jobs.add_metric([outcome], getattr(report, outcome))
    return [
        jobs,
        GaugeMetricFamily(
            "delayq_last_run_duration_seconds", "How long the last run took.", report.elapsed
        ),
        _run_ended(now),
    ]


def _recorded_run(index: Index) -> list[GaugeMetricFamily]:
    """When the last run recorded in Redis ended, as `delayq status` reads it, for a file that
    `delayq metrics --file` writes from cron; nothing when no run has recorded itself, so that
    an alert's absent() says so rather than a made-up time."""
    last = read_last_run(index.registry)
    if last is None or last.finished_at is None:
        return []
    return [_run_ended(last.finished_at)]


def _run_ended(at: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "delayq_last_run_timestamp_seconds", "When the last run ended (a loop: its last beat).", at
    )
