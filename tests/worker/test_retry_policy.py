"""Retry policies per job (`retries=`, `retry_delays=`, `add --retries --retry-delays`) and
per handler (`@delayq.retry_policy`): the job's settings beat the handler's, which beat
the default ladder; rows without one (older rows, PHP producers) keep the ladder."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from delayq import BadInput, JobSpec, Status
from delayq.store.index.keys import schedule_key
from delayq.store.table.model import Job
from tests.conftest import changes_made
from tests.faults.test_processes import delayq, statuses
from tests.sample_handlers.jobs import read_log

NOW = 1_800_000_000.0
H = "tests.sample_handlers.jobs"
R = "tests.sample_handlers.retrying"


def run_until_idle(queue, now: float) -> list[float]:
    """Run every attempt the moment it falls due; the times they ran, relative to NOW."""
    ran = []
    for _ in range(50):
        due = [row.run_at for row in Job.select().where(Job.status == Status.PENDING)]
        if not due:
            return ran
        now = max(now, min(due))
        assert queue.run(now=now).claimed == 1
        ran.append(now - NOW)
    raise AssertionError("still retrying after 50 runs")


def test_a_job_with_retries_and_delays_follows_them_then_stops(queue, log):
    first = queue.add(
        H, "fail", {"log": log}, retries=3, retry_delays=["10s", timedelta(minutes=1)], now=NOW
    )

    assert run_until_idle(queue, NOW) == [0, 10, 70, 130]  # the last step repeats
    chain = queue.history(first)
    assert [attempt["retry_times"] for attempt in chain] == [0, 1, 2, 3]
    assert [attempt["status"] for attempt in chain] == ["failed"] * 4
    assert len(read_log(log)) == 4
    assert Job.get_by_id(first).retry_policy == '{"retries":3,"delays":[10,60]}'


def test_retries_zero_fails_once_and_delays_alone_allow_one_retry_per_step(queue, log):
    never = queue.add(H, "fail", {"log": log}, retries=0, now=NOW)
    queue.run(now=NOW)
    assert [attempt["status"] for attempt in queue.history(never)] == ["failed"]
    assert Job.select().where(Job.status == Status.PENDING).count() == 0

    stepped = queue.add(H, "fail", {"log": log}, retry_delays=[1, 2], now=NOW)
    assert run_until_idle(queue, NOW) == [0, 1, 3]
    assert len(queue.history(stepped)) == 3


def test_retries_alone_keep_the_ladder_and_repeat_its_last_step(queue, log):
    queue.add(H, "fail", {"log": log}, retries=2, now=NOW)
    assert run_until_idle(queue, NOW) == [0, 15, 30]


def test_a_handler_policy_applies_and_the_jobs_own_settings_beat_it(queue, log):
    queue.add(R, "flaky", {"log": log}, now=NOW)
    assert run_until_idle(queue, NOW) == [0, 10, 70]

    Job.delete().execute()
    queue.add(R, "flaky", {"log": log}, retries=1, now=NOW)  # the handler's delays, not retries
    assert run_until_idle(queue, NOW) == [0, 10]

    Job.delete().execute()
    queue.add(R, "flaky", {"log": log}, retry_delays=[7], now=NOW)  # the handler's 2 retries
    assert run_until_idle(queue, NOW) == [0, 7, 14]

    Job.delete().execute()
    queue.add(R, "one_step", {"log": log}, now=NOW)  # delays=[5] alone: one retry
    assert run_until_idle(queue, NOW) == [0, 5]

    Job.delete().execute()
    queue.add(R + ".Billing", "charge", {"log": log}, now=NOW)  # declared on a method
    assert run_until_idle(queue, NOW) == [0, 120]


def test_a_retry_and_an_operators_retry_keep_the_policy(queue, log):
    first = queue.add(H, "fail", {"log": log}, retries=1, retry_delays=["1m"], now=NOW)
    run_until_idle(queue, NOW)
    again = queue.retry(first, now=NOW + 1000)

    assert Job.get_by_id(again).retry_policy == '{"retries":1,"delays":[60]}'
    assert Job.get_by_id(again).retry_times == 2
    queue.run(now=NOW + 1000)
    assert Job.select().where(Job.status == Status.PENDING).count() == 0  # retries used up


def test_a_row_without_a_policy_keeps_the_default_ladder(queue, log):
    job_id = queue.add(H, "fail", {"log": log}, now=NOW)
    assert Job.get_by_id(job_id).retry_policy is None
    Job.update(retry_policy="{not json").where(Job.id == job_id).execute()  # a foreign writer

    queue.run(now=NOW)

    (retry,) = Job.select().where(Job.status == Status.PENDING)
    assert (retry.run_at, retry.retry_times) == (NOW + 15, 1)


BAD_POLICIES = {
    "retries-negative": ({"retries": -1}, "retries must be a whole number from 0 to 100"),
    "retries-101": ({"retries": 101}, "from 0 to 100"),
    "retries-bool": ({"retries": True}, "retries must be a whole number"),
    "retries-float": ({"retries": 2.0}, "retries must be a whole number"),
    "retries-text": ({"retries": "3"}, "retries must be a whole number"),
    "delays-text": ({"retry_delays": "10s,1m"}, "retry delays must be a list"),
    "delays-empty": ({"retry_delays": []}, "1 to 20 steps"),
    "delays-21": ({"retry_delays": [1] * 21}, "1 to 20 steps"),
    "delays-nan": ({"retry_delays": [float("nan")]}, "finite"),
    "delays-negative": ({"retry_delays": [-1]}, "between 0 and 365 days"),
    "delays-2-years": ({"retry_delays": ["730d"]}, "between 0 and 365 days"),
    "delays-bool": ({"retry_delays": [True]}, "must be a number of seconds"),
    "delays-surrogate": ({"retry_delays": ["1m\udcff"]}, "not a duration"),
    "delays-too-long-stored": ({"retry_delays": [1.0123456789012345] * 20}, "limit is 255"),
}


@pytest.mark.parametrize(("fields", "reason"), BAD_POLICIES.values(), ids=BAD_POLICIES.keys())
def test_a_bad_policy_is_one_line_of_bad_input_and_writes_nothing(queue, fields, reason):
    with pytest.raises(BadInput, match=reason) as refused:
        queue.add(H, "echo", now=NOW, **fields)
    with pytest.raises(BadInput):
        queue.add_many([JobSpec(H, "echo"), JobSpec(H, "echo", **fields)], now=NOW)

    assert "\n" not in str(refused.value)
    assert (Job.select().count(), queue.index.client.zcard(schedule_key("default"))) == (0, 0)


def test_a_bad_handler_policy_is_refused_where_it_is_declared():
    import delayq

    with pytest.raises(BadInput, match="retries must be a whole number"):
        delayq.retry_policy(retries=-1)
    with pytest.raises(BadInput, match="retry delays must be a list"):
        delayq.retry_policy(delays="10s")


def test_add_retries_and_retry_delays_on_the_command_line_reach_a_real_run(queue, cli_env, log):
    added = delayq(
        cli_env,
        "add",
        H,
        "fail",
        "--data",
        f'{{"log": "{log}"}}',
        "--retries",
        "1",
        "--retry-delays",
        "2h,1d",
    )
    assert (added.returncode, added.stderr) == (0, b"")
    job_id = int(added.stdout)
    before = time.time()

    ran = delayq(cli_env, "run")

    assert (ran.returncode, ran.stdout, ran.stderr) == (0, b"", b"")
    rows = statuses()
    (retry_id,) = [other for other in rows if other != job_id]
    assert rows == {job_id: Status.FAILED, retry_id: Status.PENDING}
    retry = Job.get_by_id(retry_id)
    assert retry.retry_times == 1
    assert before + 7200 <= retry.run_at <= time.time() + 7200
    assert retry.retry_policy == '{"retries":1,"delays":[7200,86400]}'


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(["--retries", "-1"], b"--retries '-1' is negative", id="negative"),
        pytest.param(["--retries", "three"], b"--retries must be a whole number", id="word"),
        pytest.param(["--retries", "\u0663"], b"--retries must be a whole number", id="digit"),
        pytest.param(["--retries", "9" * 30], b"--retries must be a whole number", id="huge"),
        pytest.param(["--retries", "101"], b"from 0 to 100", id="over-100"),
        pytest.param(["--retry-delays", ""], b"is not a duration", id="empty"),
        pytest.param(["--retry-delays", "10s,,1m"], b"is not a duration", id="empty-step"),
        pytest.param(["--retry-delays", "10s,soon"], b"'soon' is not a duration", id="word"),
        pytest.param(["--retry-delays", "1\x1b[2J"], b"\\x1b", id="control"),
        pytest.param(["--retry-delays", ",".join(["1"] * 21)], b"1 to 20 steps", id="21"),
    ],
)
def test_bad_retry_options_exit_2_with_one_line_and_write_nothing(queue, cli_env, args, expected):
    completed = delayq(cli_env, "add", H, "echo", *args)

    assert (completed.returncode, completed.stdout) == (2, b"")
    assert len(completed.stderr.splitlines()) == 1, completed.stderr
    assert completed.stderr.startswith(b"delayq: error: ")
    assert expected in completed.stderr
    assert Job.select().count() == 0


def test_an_outcome_journaled_by_an_earlier_version_follows_the_jobs_policy():
    from delayq.store.table.model import ClaimedJob
    from delayq.worker.recovery import journaled_outcome

    def journaled(policy: str | None, record: str) -> float | None:
        job = ClaimedJob(7, "{}", "", 2, "default", None, NOW, None, None, None, policy)
        return journaled_outcome(job, record, {}).next_in

    assert journaled(None, '[20, "ValueError: x", true, 1.5]') == 30.0  # the ladder's third
    assert journaled('{"retries":2}', '[20, "ValueError: x", true, 1.5]') is None
    assert journaled(None, '[20, "NoRetry: x", false, 1.5]') is None
    assert journaled(None, '[20, "ValueError: x", 45.0, 1.5]') == 45.0


def test_init_adds_the_column_to_an_earlier_version_s_table_whose_rows_keep_the_ladder(queue, log):
    job_id = queue.add(H, "fail", {"log": log}, now=NOW)
    queue.db.execute_sql("ALTER TABLE delay_queue DROP COLUMN retry_policy")

    assert changes_made(queue.init(now=NOW)) == ["added column retry_policy"]
    assert changes_made(queue.init(now=NOW)) == []

    queue.run(now=NOW)
    (retry,) = Job.select().where(Job.status == Status.PENDING)
    assert (retry.chain_id, retry.retry_times, retry.run_at) == (job_id, 1, NOW + 15)
    assert retry.retry_policy is None


def test_add_many_stores_each_jobs_own_policy(queue):
    specs = [
        JobSpec(H, "echo", retries=n % 3 or None, retry_delays=["1m"] if n % 2 else None)
        for n in range(6)
    ]

    ids = queue.add_many(specs, now=NOW)

    assert [Job.get_by_id(job_id).retry_policy for job_id in ids] == [
        None,
        '{"retries":1,"delays":[60]}',
        '{"retries":2}',
        '{"delays":[60]}',
        '{"retries":1}',
        '{"retries":2,"delays":[60]}',
    ]
