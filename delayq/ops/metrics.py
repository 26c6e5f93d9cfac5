"""Prometheus text exposition of one run, for node_exporter's textfile collector.

This module owns the metric names and writes the file atomically — a temporary file in the
same directory, then os.replace — so the collector never reads half a file. It measures
nothing itself: the caller hands in the run's report (with its lateness histogram) and the
queues' stats.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from ..errors import ConfigError
from ..worker.report import LATENESS_BUCKETS, Lateness, RunReport
from .overview import QueueStats

# The run report has no per-queue split yet, so run totals carry this queue label.
ALL_QUEUES = "all"
RUN_OUTCOMES = ("claimed", "succeeded", "failed", "retried", "missed")


def write_metrics(
    path: str | Path,
    report: RunReport,
    queue_stats: Mapping[str, QueueStats],
    now: float | None = None,
) -> None:
    """Replace the file at `path` with the metrics of this run and these queues."""
    registry = build_registry(report, queue_stats, time.time() if now is None else now)
    _replace_file(Path(path), generate_latest(registry))


def build_registry(
    report: RunReport, queue_stats: Mapping[str, QueueStats], now: float
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
    registry.register(_LatenessCollector(report.lateness))
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


class _LatenessCollector(Collector):
    """The run's fixed-bucket lateness histogram as a Prometheus histogram."""

    def __init__(self, lateness: Lateness) -> None:
        self.lateness = lateness

    def collect(self) -> Sequence[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            "delayq_last_run_lateness_seconds",
            "Seconds from a job's due time to its start, over the jobs of the last run.",
            labels=["queue"],
        )
        cumulative, buckets = 0, []
        for bound, count in zip(LATENESS_BUCKETS, self.lateness.counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
        family.add_metric([ALL_QUEUES], buckets, self.lateness.total)
        return [family]


def check_writable(path: str | Path) -> None:
    """Raise ConfigError now if the file could not be replaced after the run: a run that
    finds out only then has already run its jobs, and exits 2 all the same."""
    path = Path(path)
    with _refusing(path):
        if path.is_dir():
            raise IsADirectoryError(21, "it is a directory")
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        os.unlink(temp)


def _replace_file(path: Path, body: bytes) -> None:
    with _refusing(path):
        _write_then_rename(path, body)


@contextlib.contextmanager
def _refusing(path: Path) -> Iterator[None]:
    try:
        yield
    except ValueError:  # a NUL in the path
        raise ConfigError(f"--metrics-file {str(path)!r} is not a path") from None
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
