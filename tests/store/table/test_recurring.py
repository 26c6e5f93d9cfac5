"""Recurring jobs (--every) and debounced ones (--replace), on both backends."""

from __future__ import annotations

import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from delayq import BadInput, Status
from delayq.store.index.keys import schedule_key
from delayq.store.index.schedule import Schedule
from delayq.store.table.leases import Leases
from delayq.store.table.model import Job
from delayq.store.table.outcomes import Outcome, Outcomes
from delayq.worker.retry import LADDER
from tests.conftest import DELAYQ
from tests.faults.test_faults import run_cli, wait_for_leases_to_lapse
from tests.sample_handlers.jobs import read_log

NOW = 1_800_000_000.0
H = "tests.sample_handlers.jobs"
HOUR = 3600.0


def pending(ext: str) -> list[Job]:
    return list(
        Job.select().where(Job.ext_string == ext, Job.status == Status.PENDING).order_by(Job.id)
    )


def test_a_recurring_job_re_arms_one_period_after_its_due_time(queue, log):
    first = queue.add(H, "record", {"log": log, "n": 1}, at=NOW, every=HOUR, ext="timer:1", now=NOW)

    queue.run(now=NOW + 5)

    assert queue.show(first)["status"] == "success"
    (following,) = pending("timer:1")
    assert following.run_at == NOW + HOUR  # from the due time, not from when it ran: no drift
    assert following.every == HOUR
    score = queue.index.client.zscore(schedule_key("default"), str(following.id))
    assert score == NOW + HOUR
    queue.run(now=NOW + HOUR + 7)
    assert [row.run_at for row in pending("timer:1")] == [NOW + 2 * HOUR]
    assert read_log(log) == ["1", "1"]


def test_missed_periods_are_skipped_not_run_in_a_burst(queue, log):
    queue.add(H, "record", {"log": log}, at=NOW, every=HOUR, ext="timer:2", now=NOW)

    queue.run(now=NOW + 3.5 * HOUR)

    assert len(read_log(log)) == 1
    assert [row.run_at for row in pending("timer:2")] == [NOW + 4 * HOUR]


@pytest.mark.parametrize(
    ("due", "retried_at", "following"),
    [(40 * 60, 0.0, 40 * 60), (0.0, 20 * 60, HOUR)],
    ids=["due-later", "overdue"],
)
def test_retrying_a_pending_occurrence_runs_it_now_and_keeps_the_series_phase(
    queue, log, due, retried_at, following
):
    """The occurrence runs at once, as a one-off; the series goes on at its own times (the
    occurrence's due time, or the next one after an overdue one), not a period after now."""
    first = queue.add(H, "record", {"log": log}, at=NOW + due, every=HOUR, ext="t", now=NOW)

    assert queue.retry(first, now=NOW + retried_at) == first
    queue.run(now=NOW + retried_at + 1)

    assert queue.show(first)["status"] == "success" and len(read_log(log)) == 1
    (series,) = pending("t")
    assert (series.run_at, series.every) == (NOW + following, HOUR)
    assert queue.show(first)["every"] is None  # the run it was retried into, once
    queue.run(now=NOW + following + 1)
    assert [row.run_at for row in pending("t")] == [NOW + following + HOUR]


def test_a_failed_occurrence_gets_its_retry_and_the_series_goes_on(queue, log):
    first = queue.add(H, "fail", {"log": log}, at=NOW, every=HOUR, ext="timer:3", now=NOW)

    queue.run(now=NOW)

    rows = pending("timer:3")
    assert sorted(row.run_at for row in rows) == [NOW + LADDER[0], NOW + HOUR]
    retry = next(row for row in rows if row.run_at == NOW + LADDER[0])
    assert (retry.chain_id, retry.retry_times, retry.every) == (first, 1, None)


def test_a_missed_occurrence_is_recorded_and_the_series_goes_on(queue, log):
    first = queue.add(H, "record", {"log": log}, at=NOW, every=HOUR, ext="timer:m", now=NOW)

    report = queue.run(now=NOW + 2.5 * HOUR, since=HOUR)

    assert report.missed == 1 and read_log(log) == []
    assert queue.show(first)["status"] == "missed"
    (following,) = pending("timer:m")
    assert (following.run_at, following.every) == (NOW + 3 * HOUR, HOUR)
    score = queue.index.client.zscore(schedule_key("default"), str(following.id))
    assert score == NOW + 3 * HOUR
    queue.run(now=NOW + 3 * HOUR)
    assert len(read_log(log)) == 1


def test_two_runs_marking_one_occurrence_missed_re_arm_it_once(queue):
    job_id = queue.add(H, "record", {}, at=NOW, every=HOUR, ext="timer:d", now=NOW)
    table = queue.table

    marked = [Leases(table).mark_missed([job_id], token, "missed", NOW) for token in "ab"]

    assert [[job.id for job in jobs] for jobs in marked] == [[job_id], []]


def test_a_replayed_commit_re_arms_the_series_once(queue):
    job_id = queue.add(H, "record", {}, at=NOW, every=HOUR, ext="timer:r", now=NOW)
    (job,) = Leases(queue.table).mark_running([job_id], "token", NOW + 60, NOW)
    outcome = Outcome(job=job, status=Status.SUCCESS, message="", next_in=None, finished_at=NOW + 1)

    first = Outcomes(queue.table).write_outcomes([outcome], "token")
    replay = Outcomes(queue.table).write_outcomes(
        [outcome], "token"
    )  # as after a dropped connection

    assert (first.succeeded, len(first.occurrences)) == (1, 1)
    assert (replay.succeeded, len(replay.occurrences), replay.lost) == (0, 0, [])
    assert [row.run_at for row in pending("timer:r")] == [NOW + HOUR]


def test_a_poisoned_occurrence_fails_and_the_series_goes_on(queue, cli_env, log):
    job_id = queue.add("tests.sample_handlers.faults", "die", {"log": log}, every=HOUR, ext="p")
    for _ in range(3):
        run_cli(cli_env, "run", DELAYQ_LEASE="2")
        wait_for_leases_to_lapse(queue)

    result = run_cli(cli_env, "run", DELAYQ_LEASE="2")

    assert result.returncode == 0, result.stderr
    view = queue.show(job_id)
    assert view["status"] == "failed" and "died 3 times" in view["message"]
    (following,) = pending("p")
    assert (following.every, following.run_at) == (HOUR, Job.get_by_id(job_id).run_at + HOUR)
    assert [entry.id for entry in queue.peek(1)] == [following.id]
    # An hour ahead, beyond the horizon: the run a second before walks it onto the schedule.
    assert queue.run(now=following.run_at - 1).claimed == 0
    score = queue.index.client.zscore(schedule_key("default"), str(following.id))
    assert score == following.run_at


def test_cancel_by_ext_stops_the_series(queue, log):
    queue.add(H, "record", {"log": log}, at=NOW, every=HOUR, ext="timer:4", now=NOW)
    queue.run(now=NOW)

    assert queue.cancel(ext="timer:4", now=NOW) == 1
    queue.run(now=NOW + 10 * HOUR)

    assert pending("timer:4") == []
    assert len(read_log(log)) == 1


def test_cancel_while_an_occurrence_runs_is_not_undone_by_its_re_arm(queue, log, backend):
    queue.add(
        "tests.sample_handlers.faults",
        "cancel_own_series",
        {
            "log": log,
            "env": {
                "DELAYQ_DATABASE_URL": backend["database_url"],
                "DELAYQ_REDIS_URL": backend["redis_url"],
                "DELAYQ_HANDLERS": "tests.sample_handlers",
            },
        },
        at=NOW,
        every=HOUR,
        ext="timer:5",
        now=NOW,
    )

    queue.run(now=NOW)

    assert read_log(log) == ["cancelled 0"]  # nothing pending yet while it ran
    assert pending("timer:5") == []


def test_every_must_be_a_positive_period(queue):
    with pytest.raises(BadInput, match="--every"):
        queue.add(H, "record", {}, every=0)
    assert Job.select().count() == 0


def test_replace_moves_the_pending_job_instead_of_adding_one(queue, log):
    now = float(int(time.time()))  # due within the horizon: on the schedule
    job_id = queue.add(H, "record", {"log": log, "n": 1}, delay=60, ext="k", now=now)

    again = queue.add(H, "record", {"log": log, "n": 2}, delay=120, ext="k", replace=True, now=now)

    assert again == job_id
    (row,) = pending("k")
    assert (row.id, row.run_at) == (job_id, now + 120)
    assert queue.show(job_id)["data"] == {"log": log, "n": 2}
    assert queue.index.client.zscore(schedule_key("default"), str(job_id)) == now + 120
    queue.run(now=now + 60)
    assert read_log(log) == []
    queue.run(now=now + 120)
    assert read_log(log) == ["2"]


def test_without_replace_a_second_pending_job_with_the_same_ext_is_added(queue, log):
    queue.add(H, "record", {"log": log}, delay=60, ext="k", now=NOW)
    queue.add(H, "record", {"log": log}, delay=60, ext="k", now=NOW)

    assert len(pending("k")) == 2


def test_replace_with_no_pending_job_adds_one_and_folds_duplicates(queue, log):
    now = float(int(time.time()))  # due within the horizon: on the schedule
    extra = [queue.add(H, "record", {"log": log}, delay=60, ext="k", now=now) for _ in range(2)]

    kept = queue.add(H, "record", {"log": log, "n": 9}, delay=5, ext="k", replace=True, now=now)

    assert kept == extra[0]
    assert [row.id for row in pending("k")] == [kept]
    assert queue.show(extra[1])["status"] == "cancelled"
    assert queue.index.schedule.size("default") == 1
    fresh = queue.add(H, "record", {"log": log}, ext="other", replace=True, now=now)
    assert [row.id for row in pending("other")] == [fresh]


def test_of_two_replaces_at_once_the_schedule_keeps_the_later_one(make_queue, log, monkeypatch):
    """The second replace commits after the first; the first's write to the schedule, held
    up 0.2 s, must not land after the second's and leave the entry at the older time."""
    now = float(int(time.time()))  # due within the horizon: on the schedule
    first, second = make_queue(), make_queue()
    job_id = first.add(H, "record", {"log": log}, delay=60, ext="k", now=now)
    writing, add_packed = threading.Event(), Schedule.add_packed

    def held_up(self, *args, **kwargs):
        if threading.current_thread().name == "first":
            writing.set()
            time.sleep(0.2)
        return add_packed(self, *args, **kwargs)

    monkeypatch.setattr(Schedule, "add_packed", held_up)

    def replace(queue, delay: float) -> int:
        return queue.add(H, "record", {"log": log}, delay=delay, ext="k", replace=True, now=now)

    earlier = threading.Thread(target=replace, args=(first, 120), name="first")
    earlier.start()
    assert writing.wait(10)
    later = threading.Thread(target=replace, args=(second, 300), name="second")
    later.start()
    earlier.join(10)
    later.join(10)

    (row,) = pending("k")
    assert (row.id, row.run_at) == (job_id, now + 300)
    assert first.index.client.zscore(schedule_key("default"), str(job_id)) == now + 300


def test_replace_needs_an_ext(queue):
    with pytest.raises(BadInput, match="--replace needs --ext"):
        queue.add(H, "record", {}, replace=True)


def test_concurrent_replaces_leave_exactly_one_pending_job(queue, cli_env, log):
    def add(n: int) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [
                *DELAYQ,
                "add",
                H,
                "record",
                "--data",
                f'{{"n": {n}}}',
                "--ext",
                "debounce",
                "--delay",
                "60",
                "--replace",
            ],
            env=cli_env,
            capture_output=True,
            timeout=60,
        )

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(add, range(6)))

    assert all(result.returncode == 0 for result in results), [r.stderr for r in results]
    assert len({int(result.stdout) for result in results}) == 1
    assert len(pending("debounce")) == 1
    assert Job.select().count() == 1
    assert queue.index.schedule.size("default") == 1


def test_add_every_and_replace_from_the_command_line(queue, cli_env):
    result = subprocess.run(
        [*DELAYQ, "add", H, "record", "--every", "1d", "--ext", "daily", "--delay", "1h"],
        env=cli_env,
        capture_output=True,
        timeout=60,
    )

    assert result.returncode == 0, result.stderr
    assert queue.show(int(result.stdout))["status"] == "pending"
    assert Job.get_by_id(int(result.stdout)).every == 86400
