"""worker/retry.py: the default 15-step ladder and the due time of each automatic retry, and
the decisions it owns: which failures may be retried, RetryLater's bound, poison jobs."""

from __future__ import annotations

import pytest

from delayq.base.durations import parse_duration
from delayq.errors import BadInput, HandlerNotAllowed, NoRetry
from delayq.store.table.model import ClaimedJob
from delayq.worker.interrupts import JobTimeout
from delayq.worker.retry import (
    DEFAULT_POLICY,
    LADDER,
    MAX_DEFERRALS,
    MAX_LOST_LEASES,
    MAX_RETRIES,
    Deferral,
    LostLease,
    after_deferral,
    after_failure,
    after_lost_lease,
    may_retry_raised,
    may_retry_refused,
    retry_delay,
)
from tests.sample_handlers.jobs import read_log

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0
CONTRACT = "15s,15s,30s,3m,10m,20m,30m,30m,30m,1h,3h,3h,3h,6h,6h"


def test_ladder_is_exactly_the_contract_steps():
    contract = tuple(parse_duration(step) for step in CONTRACT.split(","))
    spelled_out = (15, 15, 30, 180, 600, 1200, 1800, 1800, 1800, 3600, 10800, 10800, 10800)
    assert contract == spelled_out + (21600, 21600)
    assert contract == LADDER


def test_a_job_that_always_fails_is_retried_fifteen_times_each_one_contract_step_later(queue, log):
    # Through real runs, each at the moment the contract says the next retry is due: a
    # retry due later would not run, one due earlier shows in its run_at.
    steps = [parse_duration(step) for step in CONTRACT.split(",")]
    first = queue.add(H, "fail", {"log": log}, now=NOW)
    now = NOW
    for step in [*steps, None]:
        report = queue.run(now=now)
        assert report.failed == 1, f"nothing was due at {now - NOW:.0f}s"
        if step is not None:
            now += step

    chain = queue.history(first)
    assert [attempt["retry_times"] for attempt in chain] == list(range(16))
    due = [NOW + sum(steps[:k]) for k in range(16)]
    assert [attempt["run_at"] for attempt in chain] == pytest.approx(due)
    assert [attempt["status"] for attempt in chain] == ["failed"] * 16
    assert len(read_log(log)) == 16
    assert queue.run(now=now + 10**6).claimed == 0  # the sixteenth failure got no retry


@pytest.mark.parametrize("retry_times", range(15))
def test_retry_after_attempt_k_is_due_after_step_k_plus_one(retry_times):
    step = parse_duration(CONTRACT.split(",")[retry_times])

    assert retry_delay(DEFAULT_POLICY, retry_times) == step


def test_the_whole_ladder_spans_just_over_a_day():
    due = NOW
    for retry_times in range(MAX_RETRIES):
        due += retry_delay(DEFAULT_POLICY, retry_times) or 0

    assert due - NOW == 15 + 15 + 30 + 180 + 600 + 1200 + 3 * 1800 + 3600 + 3 * 10800 + 2 * 21600
    assert due - NOW == 86_640  # 24h04m


@pytest.mark.parametrize("retry_times", range(15))
def test_every_attempt_before_the_fifteenth_retry_gets_another(retry_times):
    assert retry_delay(DEFAULT_POLICY, retry_times) is not None


@pytest.mark.parametrize("retry_times", [15, 16, 100])
def test_the_fifteenth_retry_is_the_last(retry_times):
    assert retry_delay(DEFAULT_POLICY, retry_times) is None


def attempt(retry_times: int, policy: str | None = None) -> ClaimedJob:
    return ClaimedJob(7, "{}", "", retry_times, "default", None, NOW, None, None, None, policy)


def test_after_failure_follows_the_jobs_policy_over_the_ladder():
    assert after_failure(attempt(0)) == 15
    assert after_failure(attempt(3)) == 180
    assert after_failure(attempt(MAX_RETRIES)) is None
    assert after_failure(attempt(1, '{"retries":1}')) is None
    assert after_failure(attempt(4, '{"delays":[10,60]}')) is None  # one retry a step
    assert after_failure(attempt(1, '{"delays":[10,60]}')) == 60


def test_no_retry_and_refusals_no_retry_mends_are_not_retried_others_are():
    assert not may_retry_raised(NoRetry("give up"))
    assert may_retry_raised(ValueError("x")) and may_retry_raised(JobTimeout())
    assert not may_retry_refused(HandlerNotAllowed("DELAYQ_HANDLERS does not allow 'os'"))
    assert not may_retry_refused(BadInput("bad params: not JSON"))
    assert may_retry_refused(BadInput("no module named 'shop.jobs'"))


def test_a_deferral_past_max_deferrals_in_a_row_is_refused():
    before_last = f'{{"deferrals":{MAX_DEFERRALS - 1}}}'
    assert after_deferral(attempt(0, before_last), 30.0) == Deferral(30.0, MAX_DEFERRALS)
    assert after_deferral(attempt(0, f'{{"deferrals":{MAX_DEFERRALS}}}'), 30.0) is None
    assert after_deferral(attempt(0), 5.0) == Deferral(5.0, 1)


def test_a_job_is_poisoned_by_the_last_death_of_its_run_while_it_ran():
    last = MAX_LOST_LEASES - 1
    assert after_lost_lease(last, was_running=True) == LostLease.POISON
    assert after_lost_lease(last - 1, was_running=True) == LostLease.REQUEUE
    assert after_lost_lease(last, was_running=False) == LostLease.REQUEUE  # it had not started
