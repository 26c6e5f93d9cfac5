"""The API takes Python's own types wherever it takes a length of time or a moment:
timedelta, aware datetime, "90s"-style text and ISO 8601 text, as the command line does;
anything else (a naive datetime, a bool, a list, NaN, hostile text) is BadInput with one
line, never a TypeError, and nothing is written."""

from __future__ import annotations

import math
import time
from datetime import date, datetime, timedelta, timezone

import pytest

from delayq import BadInput, ConfigError, JobSpec
from delayq.base.durations import instant_of, seconds_of
from delayq.ops.overview import JobFilter
from delayq.store.index.keys import schedule_key
from delayq.store.table.model import Job

NOW = 1_800_000_000.0
H = "tests.sample_handlers.jobs"
BERLIN_WINTER = timezone(timedelta(hours=1))


def stored(queue) -> tuple[int, int]:
    return Job.select().count(), queue.index.client.zcard(schedule_key("default"))


def test_delay_timeout_and_every_take_timedelta_and_duration_text(queue):
    by_delta = queue.add(
        H,
        "echo",
        delay=timedelta(minutes=15),
        timeout=timedelta(seconds=90),
        every=timedelta(days=1),
        now=NOW,
    )
    by_text = queue.add(H, "echo", delay="15m", timeout="90s", every="1d", now=NOW)

    for job_id in (by_delta, by_text):
        row = Job.get_by_id(job_id)
        assert (row.run_at, row.timeout, row.every) == (NOW + 900, 90.0, 86400.0)
    assert queue.run(now=NOW + 899).claimed == 0
    assert queue.run(now=NOW + 900).succeeded == 2


def test_at_takes_an_aware_datetime_and_iso_text(queue):
    moment = datetime.fromtimestamp(NOW + 3600, timezone.utc).astimezone(BERLIN_WINTER)
    by_datetime = queue.add(H, "echo", at=moment, now=NOW)
    by_text = queue.add(H, "echo", at=moment.isoformat(), now=NOW)

    assert queue.show(by_datetime)["run_at"] == NOW + 3600
    assert queue.show(by_text)["run_at"] == NOW + 3600


def test_add_many_and_retry_take_the_same_types(queue):
    ids = queue.add_many(
        [
            JobSpec(H, "echo", delay=timedelta(hours=2)),
            JobSpec(H, "echo", at=datetime.fromtimestamp(NOW + 60, timezone.utc)),
            JobSpec(H, "echo", delay="2h", timeout="1m"),
        ],
        now=NOW,
    )
    assert [queue.show(job_id)["run_at"] for job_id in ids] == [NOW + 7200, NOW + 60, NOW + 7200]

    moved = queue.retry(ids[0], delay=timedelta(minutes=1), now=NOW)
    assert (moved, queue.show(moved)["run_at"]) == (ids[0], NOW + 60)
    assert queue.retry(ids[1], delay="5m", now=NOW) == ids[1]
    assert queue.show(ids[1])["run_at"] == NOW + 300


def test_run_and_purge_take_durations(queue):
    queue.add(H, "echo", now=NOW)
    report = queue.run(since=timedelta(days=1), max_seconds="50s", grace="1s", now=NOW + 1)
    assert report.succeeded == 1

    assert queue.purge(timedelta(days=1), now=NOW + 2) == 0
    assert queue.purge("0s", now=NOW + 2) == 1
    assert stored(queue) == (0, 0)


NAIVE = datetime(2027, 1, 15, 9, 0)
REFUSED = {
    "naive-datetime": ({"at": NAIVE}, "naive datetime; give it a time zone"),
    "a-date": ({"at": date(2027, 1, 15)}, "^at= must be epoch seconds"),
    "at-bool": ({"at": True}, "^at= must be epoch seconds"),
    "at-list": ({"at": [NOW]}, "^at= must be epoch seconds"),
    "at-surrogates": ({"at": "2027-01-15\udcff"}, "not an ISO 8601"),
    "delay-bool": ({"delay": True}, "delay must be a number of seconds"),
    "delay-list": ({"delay": [60]}, "delay must be a number of seconds"),
    "delay-dict": ({"delay": {"s": 1}}, "delay must be a number of seconds"),
    "delay-nan": ({"delay": math.nan}, "finite"),
    "delay-negative-timedelta": ({"delay": timedelta(seconds=-1)}, "non-negative"),
    "delay-text-nan": ({"delay": "nan"}, "not a duration"),
    "delay-surrogates": ({"delay": "15m\udcff"}, "not a duration"),
    "delay-control": ({"delay": "1\x1b[2Jm"}, "not a duration"),
    "delay-huge-text": ({"delay": "9" * 100_000}, "too long for a duration"),
    "delay-huge-number-text": ({"delay": "9" * 60 + "d"}, "years ahead"),
    "timeout-bool": ({"timeout": False}, "timeout must be a number of seconds"),
    "timeout-zero-timedelta": ({"timeout": timedelta(0)}, "timeout must be a positive"),
    "every-list": ({"every": ["1d"]}, "--every must be a number of seconds"),
    "every-text": ({"every": "daily"}, "not a duration"),
}


@pytest.mark.parametrize(("fields", "reason"), REFUSED.values(), ids=REFUSED.keys())
def test_a_wrong_type_is_one_line_of_bad_input_and_writes_nothing(queue, fields, reason):
    with pytest.raises(BadInput, match=reason) as refused:
        queue.add(H, "echo", now=NOW, **fields)
    with pytest.raises(BadInput):
        queue.add_many([JobSpec(H, "echo"), JobSpec(H, "echo", **fields)], now=NOW)

    message = str(refused.value)
    assert "\n" not in message and len(message) < 200
    message.encode("utf-8")  # quotes its input escaped, never a lone surrogate
    assert stored(queue) == (0, 0)


@pytest.mark.parametrize("delay", [True, [1], math.inf, "soon", datetime.now(timezone.utc)])
def test_retry_run_and_purge_refuse_a_wrong_type_with_bad_input(queue, delay):
    now = float(int(time.time()))  # due within the horizon: its entry is on the schedule
    job_id = queue.add(H, "echo", delay=60, now=now)
    with pytest.raises(BadInput):
        queue.retry(job_id, delay=delay, now=now)
    with pytest.raises(BadInput):
        queue.run(since=delay, now=now)
    with pytest.raises(BadInput):
        queue.purge(delay, now=now)
    with pytest.raises(BadInput):
        queue.run_loop(duration=delay)
    assert queue.show(job_id)["run_at"] == now + 60
    assert stored(queue) == (1, 1)


def test_conversions_agree_with_the_command_line_forms():
    assert seconds_of(timedelta(hours=1, seconds=30), "d") == seconds_of("3630s", "d") == 3630.0
    assert seconds_of(2, "d") == 2.0
    aware = datetime(2026, 1, 1, 1, 0, tzinfo=BERLIN_WINTER)
    assert instant_of(aware, "t") == instant_of("2026-01-01T01:00:00+01:00", "t") == 1767225600.0
    with pytest.raises(BadInput, match="out of range"):
        seconds_of(10**400, "delay")


def test_list_filters_and_connect_settings_take_durations(queue, make_queue):
    job_id = queue.add(H, "echo", now=NOW)

    for since in (timedelta(hours=1), "1h", 3600):
        assert [row["id"] for row in queue.list_jobs(JobFilter(since=since), now=NOW)] == [job_id]
        assert queue.list_jobs(JobFilter(since=since), now=NOW + 7200) == []
    with pytest.raises(BadInput, match="--since"):
        JobFilter(since=[1])

    tuned = make_queue(timeout=timedelta(minutes=2), since="2h")
    assert (tuned.settings.timeout, tuned.settings.since) == (120.0, 7200.0)
    with pytest.raises(ConfigError, match="DELAYQ_TIMEOUT"):
        make_queue(timeout=True)
