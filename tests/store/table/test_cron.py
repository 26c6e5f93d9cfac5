"""Recurring jobs by cron expression and time zone (--cron, --tz): the occurrences a
schedule gives across both DST changes, and the series a run re-arms, on both backends."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from delayq import BackendUnavailable, BadInput
from delayq.base.durations import FURTHEST_AHEAD
from delayq.store.index.keys import schedule_key
from delayq.store.table.recurrence import CronSchedule, parse_schedule
from tests.conftest import DELAYQ, changes_made
from tests.faults.test_faults import run_cli
from tests.sample_handlers.jobs import read_log
from tests.store.table.test_recurring import pending

H = "tests.sample_handlers.jobs"
BERLIN = ZoneInfo("Europe/Berlin")
NOW_2026 = datetime(2026, 6, 1, 12, tzinfo=timezone.utc).timestamp()


def berlin(*fields: int, fold: int = 0) -> float:
    """Epoch seconds of a wall-clock time in Berlin."""
    return datetime(*fields, tzinfo=BERLIN, fold=fold).timestamp()  # type: ignore[misc]


def local(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, BERLIN).isoformat()


def series(schedule: CronSchedule, due: float, count: int) -> list[str]:
    """`count` occurrences after `due`, each re-armed from the one before, as a run does."""
    dues = []
    for _ in range(count):
        due = schedule.next_after(due, now=due + 5)  # settled five seconds after it was due
        dues.append(local(due))
    return dues


@pytest.mark.parametrize(
    ("previous", "expected"),
    [
        # 2026-03-29 02:00 CET becomes 03:00 CEST: 02:30 does not exist that day.
        ((2026, 3, 28), ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]),
        # 2026-10-25 03:00 CEST becomes 02:00 CET: 02:30 happens twice that day.
        ((2026, 10, 24), ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]),
    ],
    ids=["spring-skips-0230-runs-at-the-change", "autumn-repeats-0230-runs-once"],
)
def test_a_daily_job_at_a_time_a_dst_change_moves_runs_once_that_day(previous, expected):
    daily = parse_schedule("30 2 * * *", "Europe/Berlin")

    assert series(daily, berlin(*previous, 2, 30), 2) == expected


def test_a_run_settled_in_the_repeated_hour_does_not_run_the_job_again():
    daily = parse_schedule("30 2 * * *", "Europe/Berlin")
    first_pass = berlin(2026, 10, 25, 2, 30)
    second_pass_before_0230 = berlin(2026, 10, 25, 2, 10, fold=1)

    following = daily.next_after(first_pass, now=second_pass_before_0230)

    assert local(following) == "2026-10-26T02:30:00+01:00"


def test_an_hourly_job_runs_in_both_passes_of_the_repeated_hour():
    hourly = parse_schedule("0 * * * *", "Europe/Berlin")

    assert series(hourly, berlin(2026, 10, 25, 1, 0), 3) == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]


def test_a_weekday_job_keeps_its_wall_clock_time_across_the_change_without_drift():
    weekdays = parse_schedule("0 9 * * MON-FRI", "Europe/Berlin")

    dues = series(weekdays, berlin(2026, 3, 26, 9, 0), 4)  # a Thursday

    assert dues == [
        "2026-03-27T09:00:00+01:00",
        "2026-03-30T09:00:00+02:00",
        "2026-03-31T09:00:00+02:00",
        "2026-04-01T09:00:00+02:00",
    ]


def test_occurrences_already_past_are_skipped_not_run_in_a_burst():
    daily = parse_schedule("0 6 * * *")

    following = daily.next_after(
        datetime(2026, 1, 1, 6, tzinfo=timezone.utc).timestamp(),
        now=datetime(2026, 1, 4, 12, tzinfo=timezone.utc).timestamp(),
    )

    assert following == datetime(2026, 1, 5, 6, tzinfo=timezone.utc).timestamp()


def test_a_series_stopped_for_years_goes_on_from_now():
    every_minute = parse_schedule("* * * * *")
    now = datetime(2026, 1, 1, 12, 0, 30, tzinfo=timezone.utc).timestamp()

    following = every_minute.next_after(now - 3 * 365 * 86400, now)

    assert following == now + 30


def test_the_first_occurrence_is_the_next_match_after_now(queue):
    now = berlin(2026, 3, 27, 9, 0)  # a Friday, at 09:00 exactly

    job_id = queue.add(H, "echo", cron="0 9 * * MON-FRI", tz="Europe/Berlin", now=now)

    assert local(queue.show(job_id)["run_at"]) == "2026-03-30T09:00:00+02:00"
    assert queue.schedule_of(job_id) == "0 9 * * MON-FRI Europe/Berlin"


def test_a_delay_or_at_starts_the_series_at_the_first_match_from_then(queue):
    now = berlin(2026, 3, 27, 8, 0)

    at_nine = queue.add(H, "echo", cron="0 9 * * *", tz="Europe/Berlin", at=now + 3600, now=now)
    later = queue.add(H, "echo", cron="0 9 * * *", tz="Europe/Berlin", delay=7200, now=now)

    assert local(queue.show(at_nine)["run_at"]) == "2026-03-27T09:00:00+01:00"
    assert local(queue.show(later)["run_at"]) == "2026-03-28T09:00:00+01:00"


def test_the_zone_defaults_to_utc(queue):
    now = NOW_2026

    job_id = queue.add(H, "echo", cron="0 9 * * *", now=now)

    assert queue.show(job_id)["run_at"] == datetime(2026, 6, 2, 9, tzinfo=timezone.utc).timestamp()
    assert queue.schedule_of(job_id) == "0 9 * * * UTC"


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        ((2026, 3, 28, 12), ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]),
        ((2026, 10, 24, 12), ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]),
    ],
    ids=["spring-forward", "autumn-back"],
)
def test_runs_across_a_dst_change_run_the_daily_job_once_a_day(queue, log, start, expected):
    now = berlin(*start)
    queue.add(
        H,
        "record",
        {"log": log, "n": "ran"},
        cron="30 2 * * *",
        tz="Europe/Berlin",
        ext="d",
        now=now,
    )
    dues = []

    for _ in range(2):
        (occurrence,) = pending("d")
        dues.append(local(occurrence.run_at))
        # A run every ten minutes through the night: each occurrence runs once.
        for step in range(0, 3 * 3600, 600):
            queue.run(now=occurrence.run_at + step)

    assert dues == expected
    assert read_log(log) == ["ran", "ran"]
    (following,) = pending("d")
    assert following.schedule == "30 2 * * * Europe/Berlin"
    score = queue.index.client.zscore(schedule_key("default"), str(following.id))
    assert score == following.run_at


def test_cancel_by_ext_stops_a_cron_series(queue, log):
    now = NOW_2026
    queue.add(H, "record", {"log": log, "n": "ran"}, cron="*/5 * * * *", ext="poll", now=now)

    assert queue.cancel(ext="poll", now=now) == 1

    queue.run(now=now + 3600)
    assert pending("poll") == [] and read_log(log) == []


def test_a_failed_cron_occurrence_gets_its_retry_and_the_series_goes_on(queue, log):
    now = NOW_2026
    queue.add(H, "fail", {"log": log, "n": "ran"}, cron="0 * * * *", ext="hourly", now=now)

    queue.run(now=now + 3600)

    rows = pending("hourly")
    assert [(row.schedule is None, row.retry_times) for row in rows] == [(True, 1), (False, 0)]
    assert rows[1].run_at == now + 2 * 3600


BAD = {
    "cron-and-every": ({"cron": "0 9 * * *", "every": 60.0}, "not both"),
    "tz-alone": ({"tz": "UTC"}, "--tz needs --cron"),
    "cron-number": ({"cron": 5}, "--cron must be text"),
    "tz-number": ({"cron": "0 9 * * *", "tz": 1}, "--tz must be text"),
    "cron-never": ({"cron": "0 0 30 2 *"}, "a cron expression that never fires"),
    # cronsim's own words after the colon differ by version ("Bad value: 32" in 2.0).
    "cron-day-32": ({"cron": "0 0 32 * *"}, "'0 0 32 \\* \\*' is not a cron expression: "),
    "cron-newline": ({"cron": "0 9 * * *\n0 10 * * *"}, "not five cron fields"),
    "tz-dotdot": ({"cron": "0 9 * * *", "tz": "Europe/../../etc/passwd"}, "not a time zone"),
    "tz-nul": ({"cron": "0 9 * * *", "tz": "UTC\0"}, "not a time zone"),
    "first-match-beyond-furthest-ahead": (
        {"cron": "0 0 1 1 *", "at": NOW_2026 + FURTHEST_AHEAD - 30, "now": NOW_2026},
        "10 years ahead",
    ),
}


@pytest.mark.parametrize(("options", "fragment"), BAD.values(), ids=BAD.keys())
def test_bad_schedules_are_refused_and_nothing_is_written(queue, options, fragment):
    with pytest.raises(BadInput, match=fragment):
        queue.add(H, "echo", **options)

    assert queue.list_jobs(queue_filter()) == []


def queue_filter():
    from delayq.ops.overview import JobFilter

    return JobFilter()


def test_add_cron_from_the_command_line_and_show_list_peek_print_it(queue, cli_env):
    added = run_cli(cli_env, "add", H, "echo", "--cron", "0 9 * * MON-FRI", "--tz", "Asia/Tokyo")

    assert (added.returncode, added.stderr) == (0, b"")
    job_id = int(added.stdout)
    shown = run_cli(cli_env, "show", str(job_id))
    assert b"schedule    0 9 * * MON-FRI Asia/Tokyo\n" in shown.stdout
    listed = json.loads(run_cli(cli_env, "list", "--json").stdout)
    assert listed["jobs"][0]["schedule"] == "0 9 * * MON-FRI Asia/Tokyo"
    peeked = json.loads(run_cli(cli_env, "peek", "--json").stdout)
    assert peeked["jobs"][0]["schedule"] == "0 9 * * MON-FRI Asia/Tokyo"
    assert b"(0 9 * * MON-FRI Asia/Tokyo)" in run_cli(cli_env, "peek").stdout


def daily_two_hours_ago() -> CronSchedule:
    """A daily Berlin schedule whose last match was two hours ago, whatever the time of day:
    a fixed hour would put that match more than a day back for an hour a day, and `add`
    refuses such a due time as missed."""
    local = datetime.fromtimestamp(time.time() - 7200, ZoneInfo("Europe/Berlin"))
    return parse_schedule(f"{local.minute} {local.hour} * * *", "Europe/Berlin")


def test_delayq_run_re_arms_a_due_cron_job_at_its_next_match(queue, cli_env, log):
    daily = daily_two_hours_ago()
    due = daily.first_after(time.time() - 3 * 3600)  # two hours ago: due, not missed
    queue.add(
        H, "record", {"log": log, "n": "ran"}, cron=daily.expression, tz=daily.zone, ext="e", at=due
    )
    assert [row.run_at for row in pending("e")] == [due]

    before = time.time()
    result = subprocess.run([*DELAYQ, "run"], env=cli_env, capture_output=True, timeout=60)
    after = time.time()

    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    assert read_log(log) == ["ran"]
    (following,) = pending("e")
    assert following.run_at in {daily.next_after(due, before), daily.next_after(due, after)}
    assert following.schedule == f"{daily.expression} Europe/Berlin"


def test_init_adds_the_schedule_column_to_an_earlier_delayqs_table(queue, log):
    queue.add(H, "record", {"log": log, "n": "timer"}, every=3600.0, ext="t", now=NOW_2026)
    queue.db.execute_sql("ALTER TABLE delay_queue DROP COLUMN schedule")

    assert changes_made(queue.init()) == ["added column schedule"]

    assert changes_made(queue.init()) == []
    queue.add(H, "record", {"log": log, "n": "cron"}, cron="0 * * * *", ext="c", now=NOW_2026)
    queue.run(now=NOW_2026 + 3600)
    assert sorted(read_log(log)) == ["cron", "timer"]
    assert [row.schedule for row in pending("c")] == ["0 * * * * UTC"]
    assert [(row.every, row.schedule) for row in pending("t")] == [(3600.0, None)]


def test_retrying_a_pending_occurrence_runs_it_now_and_the_series_goes_on_once(queue, log):
    first = queue.add(
        H, "record", {"log": log, "n": "ran"}, cron="0 9 * * *", ext="r", now=NOW_2026
    )

    assert queue.retry(first, now=NOW_2026) == first  # moved to now, not a second series
    queue.run(now=NOW_2026 + 1)

    assert read_log(log) == ["ran"]
    (following,) = pending("r")
    assert following.run_at == datetime(2026, 6, 2, 9, tzinfo=timezone.utc).timestamp()
    assert following.schedule == "0 9 * * * UTC"


def test_replace_moves_a_pending_cron_job_to_its_new_schedule(queue):
    queue.add(H, "echo", cron="0 9 * * *", ext="x", now=NOW_2026)

    moved = queue.add(H, "echo", cron="30 18 * * *", tz="Asia/Tokyo", ext="x", replace=True)

    assert [row.id for row in pending("x")] == [moved]
    assert queue.schedule_of(moved) == "30 18 * * * Asia/Tokyo"


def test_a_schedule_no_delayq_wrote_ends_its_series_and_the_run_goes_on(queue, log, caplog):
    job_id = queue.add(
        H, "record", {"log": log, "n": "ran"}, cron="0 9 * * *", ext="g", now=NOW_2026
    )
    model = queue.table.model
    model.update(schedule="0 9 * * * Mars/Base").where(model.id == job_id).execute()

    report = queue.run(now=NOW_2026 + 86400)

    assert (report.succeeded, read_log(log), pending("g")) == (1, ["ran"], [])
    assert f"job {job_id} not re-armed: --tz 'Mars/Base' is not a known time zone" in caplog.text


NO_SYSTEM_ZONES = {"PYTHONTZPATH": "/nonexistent"}  # zoneinfo then reads only tzdata's copy


def test_zones_come_from_the_tzdata_package_where_the_system_has_none():
    requirements = importlib.metadata.requires("delayq") or []
    assert any(line.split(";")[0].startswith("tzdata>=") for line in requirements)
    assert not any(line.startswith("tzdata") and ";" in line for line in requirements)
    probe = "import zoneinfo; print(zoneinfo.TZPATH, zoneinfo.ZoneInfo('Europe/Berlin'))"

    seen = subprocess.run(
        [sys.executable, "-c", probe], env={**os.environ, **NO_SYSTEM_ZONES},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip

    assert seen.stdout == "('/nonexistent',) Europe/Berlin\n"


def test_a_berlin_cron_job_is_added_and_re_armed_without_the_system_zone_database(
    queue, cli_env, log
):
    daily = daily_two_hours_ago()
    due = daily.first_after(time.time() - 3 * 3600)  # two hours ago: due, not missed
    at = datetime.fromtimestamp(due, timezone.utc).isoformat()
    data = json.dumps({"log": log, "n": "ran"})

    added = run_cli(
        cli_env, "add", H, "record", "--data", data, "--cron", daily.expression,
        "--tz", "Europe/Berlin", "--ext", "e", "--at", at, **NO_SYSTEM_ZONES,
    )  # fmt: skip
    before = time.time()
    ran = run_cli(cli_env, "run", **NO_SYSTEM_ZONES)
    after = time.time()

    assert (added.returncode, added.stderr) == (0, b"")
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, b"", b"")
    assert read_log(log) == ["ran"]
    (following,) = pending("e")
    assert following.run_at in {daily.next_after(due, before), daily.next_after(due, after)}
    assert following.schedule == f"{daily.expression} Europe/Berlin"


def test_a_run_on_a_table_without_a_column_this_delayq_reads_says_to_run_init(queue, log):
    # An upgrade adds a column that every run reads; until `delayq init`, cron's runs must
    # say what to do, not print the database's own words alone.
    queue.add(H, "record", {"log": log, "n": "after init"}, now=NOW_2026)
    queue.db.execute_sql("ALTER TABLE delay_queue DROP COLUMN schedule")

    with pytest.raises(BackendUnavailable) as refused:
        queue.run(now=NOW_2026)

    assert "lacks a column this delayq reads" in str(refused.value)
    assert str(refused.value).endswith("run `delayq init` once to add it")
    assert read_log(log) == []
    assert changes_made(queue.init()) == ["added column schedule"]
    queue.run(now=NOW_2026)
    assert read_log(log) == ["after init"]
