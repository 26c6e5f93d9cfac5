"""delayq.retry: the fixed 15-step ladder and the due time of each automatic retry."""

from __future__ import annotations

import pytest

from delayq.durations import parse_duration
from delayq.retry import LADDER, MAX_RETRIES, next_run_at, should_retry

NOW = 1_800_000_000.0
CONTRACT = "15s,15s,30s,3m,10m,20m,30m,30m,30m,1h,3h,3h,3h,6h,6h"


def test_ladder_is_exactly_the_contract_steps():
    contract = tuple(parse_duration(step) for step in CONTRACT.split(","))
    spelled_out = (15, 15, 30, 180, 600, 1200, 1800, 1800, 1800, 3600, 10800, 10800, 10800)
    assert contract == spelled_out + (21600, 21600)
    assert contract == LADDER


def test_there_are_fifteen_automatic_retries():
    assert MAX_RETRIES == 15
    assert len(LADDER) == MAX_RETRIES


@pytest.mark.parametrize("retry_times", range(15))
def test_retry_after_attempt_k_is_due_after_step_k_plus_one(retry_times):
    step = parse_duration(CONTRACT.split(",")[retry_times])

    assert next_run_at(retry_times, NOW) == NOW + step


def test_the_whole_ladder_spans_just_over_a_day():
    due = NOW
    for retry_times in range(MAX_RETRIES):
        due = next_run_at(retry_times, due)

    assert due - NOW == 15 + 15 + 30 + 180 + 600 + 1200 + 3 * 1800 + 3600 + 3 * 10800 + 2 * 21600
    assert due - NOW == 86_640  # 24h04m


@pytest.mark.parametrize("retry_times", range(15))
def test_every_attempt_before_the_fifteenth_retry_gets_another(retry_times):
    assert should_retry(retry_times)


@pytest.mark.parametrize("retry_times", [15, 16, 100])
def test_the_fifteenth_retry_is_the_last(retry_times):
    assert not should_retry(retry_times)
