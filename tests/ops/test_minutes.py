"""Per-minute aggregates in Redis: what `delayq run` processes add to them, how long they are
kept, and the read side a dashboard draws from (ops/minutes.py)."""

from __future__ import annotations

import math
import time

import pytest

from delayq.ops.minutes import LATENESS_BOUNDS, Minute, merge, per_minute
from delayq.store.index.tallies import MINUTE_TTL
from tests.faults.test_processes import delayq
from tests.sample_handlers.jobs import read_log

H = "tests.sample_handlers.jobs"
ZEROS = (0,) * len(LATENESS_BOUNDS)


def minute(start: float = 0.0, queue: str = "q", buckets: tuple[int, ...] = ZEROS, **counts):
    fields = {"succeeded": 0, "failed": 0, "retried": 0, "missed": 0} | counts
    return Minute(
        start, queue, lateness_buckets=buckets, lateness_sum=0.0, duration_sum=0.0, **fields
    )


def buckets(**at_bound: int) -> tuple[int, ...]:
    """Bucket counts given as {"b<index>": count}."""
    return tuple(at_bound.get(f"b{i}", 0) for i in range(len(LATENESS_BOUNDS)))


def test_outcomes_of_two_separate_runs_add_up_in_their_minutes(queue, cli_env, log):
    queue.add(H, "record", {"log": log, "n": 1})
    queue.add(H, "fail", {"log": log, "n": 2})
    queue.add(H, "record", {"log": log, "n": 3}, queue="mail")
    queue.add(H, "record", {"log": log, "n": 4}, now=time.time() - 600)  # missed below

    first = delayq(cli_env, "run", "--since", "5m", "--queue", "default", "--queue", "mail")
    queue.add(H, "record", {"log": log, "n": 5})
    second = delayq(cli_env, "run")

    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    assert sorted(read_log(log)) == ["1", "3", "5", "fail 2"]
    window = per_minute(queue, minutes=3)
    by_queue = {name: merge(m for m in window if m.queue == name) for name in ("default", "mail")}
    assert {m.queue for m in window} == {"default", "mail"}
    assert len(window) == 6  # three minutes for each queue that had jobs
    assert [m.start for m in window] == sorted(m.start for m in window)
    assert all(m.start % 60 == 0 for m in window)
    default, mail = by_queue["default"], by_queue["mail"]
    assert (default.succeeded, default.failed, default.retried, default.missed) == (2, 1, 1, 1)
    assert (mail.succeeded, mail.failed, mail.retried, mail.missed) == (1, 0, 0, 0)
    assert sum(default.lateness_buckets) == 3  # the calls that started, not the missed one
    assert default.duration_sum > 0 and default.lateness_sum >= 0
    assert merge(window).succeeded == 3


def test_every_minute_hash_expires_after_a_day_and_an_hour(queue, cli_env, log):
    queue.add(H, "record", {"log": log})

    assert delayq(cli_env, "run").returncode == 0

    keys = list(queue.index.client.scan_iter(match="*minute:*"))
    assert keys
    for key in keys:
        assert 86400 < queue.index.client.ttl(key) <= MINUTE_TTL


def test_minutes_without_jobs_are_zeros_and_the_window_moves_with_now(queue, cli_env, log):
    queue.add(H, "record", {"log": log})
    assert delayq(cli_env, "run").returncode == 0
    [busy] = [m for m in per_minute(queue, minutes=1) if m.succeeded]

    later = per_minute(queue, minutes=4, now=busy.start + 3 * 60 + 1)
    gone = per_minute(queue, minutes=4, now=busy.start + 4 * 60)

    assert [m.start for m in later] == [busy.start + 60 * k for k in range(4)]
    assert [m.succeeded for m in later] == [1, 0, 0, 0]
    assert later[1] == minute(busy.start + 60, "default")
    assert gone == []  # no queue had a job in that window
    assert per_minute(queue, queues=["mail"]) == []


def test_quantiles_interpolate_within_the_bucket_like_histogram_quantile():
    two_buckets = minute(buckets=buckets(b8=2, b9=2))  # (0.5, 1] twice, (1, 2.5] twice

    assert two_buckets.lateness_quantile(0.5) == 1.0
    assert two_buckets.lateness_quantile(0.75) == pytest.approx(1.75)
    assert two_buckets.lateness_quantile(0.0) == 0.5
    assert minute().lateness_quantile(0.99) is None


def test_a_quantile_in_the_last_bucket_is_its_lower_bound():
    assert math.isinf(LATENESS_BOUNDS[-1])
    late = minute(buckets=buckets(**{f"b{len(LATENESS_BOUNDS) - 1}": 3}))

    assert late.lateness_quantile(0.99) == LATENESS_BOUNDS[-2]


@pytest.mark.parametrize("q", [-0.1, 1.5, math.nan])
def test_a_quantile_outside_zero_to_one_is_refused(q):
    with pytest.raises(ValueError, match="between 0 and 1"):
        minute(buckets=buckets(b0=1)).lateness_quantile(q)


def test_merge_sums_counts_and_buckets_across_queues_and_minutes():
    merged = merge(
        [
            minute(60.0, "a", buckets(b0=1), succeeded=1, missed=2),
            minute(0.0, "b", buckets(b0=2, b3=1), failed=3, retried=1),
        ]
    )

    assert (merged.start, merged.queue) == (0.0, "")
    assert (merged.succeeded, merged.failed, merged.retried, merged.missed) == (1, 3, 1, 2)
    assert merged.lateness_buckets == buckets(b0=3, b3=1)
    assert merge([]) == minute(0.0, "")


def test_a_window_of_no_minutes_is_refused(queue):
    with pytest.raises(ValueError, match="at least 1"):
        per_minute(queue, minutes=0)
