"""Prometheus text exposition of one run, for node_exporter's textfile collector.

This module owns the metric names and writes the file atomically — a temporary file in the
same directory, then os.replace — so the collector never reads half a file. It measures
nothing itself: the caller hands in the run's report, the queues' stats and the lateness.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from .errors import ConfigError
from .reports import QueueStats
from .runner import RunReport

# The run report has no per-queue split yet, so run totals carry this queue label.
ALL_QUEUES = "all"
RUN_OUTCOMES = ("claimed", "succeeded", "failed", "retried", "missed")
LATENESS_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


def write_metrics(
    path: str | Path,
    report: RunReport,
    queue_stats: Mapping[str, QueueStats],
    lateness: Sequence[float] | None = None,
    now: float | None = None,
) -> None:
    """Replace the file at `path` with the metrics of this run and these queues.

    `lateness` (seconds from due to start, one per job) defaults to the report's own
    `lateness` list once the runner records one; without either the histogram is left out.
    """
    if lateness is None:
        lateness = getattr(report, "lateness", None)
    registry = build_registry(report, queue_stats, lateness, time.time() if now is None else now)
    _replace_file(Path(path), generate_latest(registry))


def build_registry(
    report: RunReport,
    queue_stats: Mapping[str, QueueStats],
    lateness: Sequence[float] | None,
    now: float,
) -> CollectorRegistry:
    """A registry of its own (never the global one) holding every delayq metric."""
    registry = CollectorRegistry(auto_describe=True)
    jobs = Gauge(
        "delayq_last_run_jobs",
        "Jobs the last run handled, by outcome (queue=all: the run's totals).",
        ["queue", "outcome"],
        registry=registry,
    )
    for outcome in RUN_OUTCOMES:
        jobs.labels(queue=ALL_QUEUES, outcome=outcome).set(getattr(report, outcome))
    _gauge(registry, "delayq_last_run_duration_seconds", "How long the last run took.").set(
        report.elapsed
    )
    _gauge(registry, "delayq_last_run_timestamp_seconds", "When the last run ended.").set(now)
    _add_queue_gauges(registry, queue_stats)
    if lateness is not None:
        _add_lateness(registry, lateness)
    return registry


def _gauge(registry: CollectorRegistry, name: str, text: str) -> Gauge:
    return Gauge(name, text, registry=registry)


def _add_queue_gauges(registry: CollectorRegistry, queue_stats: Mapping[str, QueueStats]) -> None:
    backlog = Gauge(
        "delayq_backlog_jobs", "Pending jobs already due, per queue.", ["queue"], registry=registry
    )
    oldest = Gauge(
        "delayq_oldest_due_age_seconds",
        "How long the oldest due pending job has waited, per queue (0: none is due).",
        ["queue"],
        registry=registry,
    )
    for name, stats in queue_stats.items():
        backlog.labels(queue=name).set(stats.pending_due)
        oldest.labels(queue=name).set(stats.oldest_due_lag or 0.0)


def _add_lateness(registry: CollectorRegistry, lateness: Sequence[float]) -> None:
    histogram = Histogram(
        "delayq_last_run_lateness_seconds",
        "Seconds from a job's due time to its start, over the jobs of the last run.",
        ["queue"],
        buckets=LATENESS_BUCKETS,
        registry=registry,
    )
    for seconds in lateness:
        histogram.labels(queue=ALL_QUEUES).observe(max(0.0, seconds))


def _replace_file(path: Path, body: bytes) -> None:
    try:
        _write_then_rename(path, body)
    except OSError as exc:
        raise ConfigError(
            f"--metrics-file {str(path)!r} cannot be written: {exc.strerror or exc}"
        ) from None


def _write_then_rename(path: Path, body: bytes) -> None:
    # The temporary name does not end in .prom, so the collector never picks it up.
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, 0o644)  # mkstemp makes it 0600; node_exporter runs as another user
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
