"""One job must never stop a queue: text UTF-8 cannot hold, exceptions that are not
Exceptions, results that cannot be shown. Each such job settles (failed and retried, or
succeeded with what can be shown) and the job after it still runs, one at a time and with
many in flight, for plain and async handlers, on both backends."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
import redis

from delayq import BadInput, JobSpec, Status
from delayq.store.index.keys import queue_key
from delayq.store.table.leases import Leases
from delayq.store.table.model import Job
from tests.conftest import DELAYQ, ROOT
from tests.sample_handlers.jobs import read_log
from tests.support.waiting import wait_for

NOW = 1_800_000_000.0
H = "tests.sample_handlers.jobs"
X = "tests.sample_handlers.hostile"
ESCAPED = "\\udcff"  # how a lone surrogate is stored: visible, and valid UTF-8
MODES = pytest.mark.parametrize("concurrency", [1, 3], ids=["one-at-a-time", "pool"])


def _retries_of(job_id: int) -> list[Job]:
    return list(Job.select().where(Job.chain_id == job_id))


@MODES
def test_lone_surrogates_in_a_result_or_an_error_are_stored_escaped(queue, log, concurrency):
    result = queue.add(X, "surrogate_result", {"log": log, "n": 1}, now=NOW)
    error = queue.add(X, "raise_", {"log": log, "raise": "surrogate"}, now=NOW)
    after = queue.add(H, "record", {"log": log, "n": "after"}, now=NOW)

    report = queue.run(now=NOW, concurrency=concurrency)

    assert (report.succeeded, report.failed) == (2, 1)
    assert queue.show(result)["status"] == "success"
    assert queue.show(result)["message"] == f"wrote report-{ESCAPED}.csv"
    assert queue.show(error)["status"] == "failed"
    assert queue.show(error)["message"] == f"ValueError: cannot open report-{ESCAPED}.csv"
    assert len(_retries_of(error)) == 1
    assert queue.show(after)["status"] == "success"
    assert Job.select().where(Job.status == Status.RUNNING).count() == 0


def test_a_dead_runs_journaled_surrogate_is_settled_by_recovery(queue, log, backend):
    # An outcome journaled as an earlier version wrote it: the raw text, JSON-escaped.
    job_id = queue.add(X, "surrogate_result", {"log": log}, now=NOW)
    Leases(queue.table).mark_running([job_id], "dead-run", NOW - 120, NOW - 180)
    record = json.dumps([int(Status.SUCCESS), "wrote report-\udcff.csv", False, NOW - 170])
    redis.Redis.from_url(backend["redis_url"]).hset(
        queue_key("default", "journal"), str(job_id), record
    )

    report = queue.run(now=NOW)

    assert report.recovered == 1
    assert queue.show(job_id)["status"] == "success"
    assert queue.show(job_id)["message"] == f"wrote report-{ESCAPED}.csv"
    assert read_log(log) == []  # recorded from the journal, not run again


@MODES
@pytest.mark.parametrize("method", ["raise_", "raise_async"])
@pytest.mark.parametrize(
    "kind",
    ["KeyboardInterrupt", "SystemExit", "GeneratorExit", "Unraisable", "Unprintable", "SlyText"],
)
def test_a_handler_raising_any_base_exception_fails_its_job_and_the_run_goes_on(
    queue, log, concurrency, method, kind
):
    job_id = queue.add(X, method, {"log": log, "raise": kind}, now=NOW)
    after = queue.add(H, "record", {"log": log, "n": "after"}, now=NOW)

    report = queue.run(now=NOW, concurrency=concurrency)

    assert (report.succeeded, report.failed, report.retried) == (1, 1, 1)
    view = queue.show(job_id)
    assert view["status"] == "failed"
    assert view["message"].startswith(kind)
    [retry] = _retries_of(job_id)
    assert (retry.status, retry.retry_times) == (Status.PENDING, 1)
    assert queue.show(after)["status"] == "success"
    assert sorted(read_log(log)) == ["after", f"raise {kind}"]


@MODES
def test_a_base_exception_keeps_failing_up_the_ladder_until_it_stops(queue, log, concurrency):
    job_id = queue.add(X, "raise_", {"log": log, "raise": "Unraisable"}, now=NOW)
    at = NOW
    for _ in range(20):  # more passes than the ladder has steps
        at += 7 * 3600
        queue.run(now=at, concurrency=concurrency, since=86400 * 30)

    chain = [job_id] + [row.id for row in _retries_of(job_id)]
    statuses = [Job.get_by_id(i).status for i in chain]
    assert statuses == [Status.FAILED] * 16  # the first attempt and the ladder's 15 retries
    assert len(read_log(log)) == 16


@MODES
@pytest.mark.parametrize("kind", ["repr", "huge int", "deep list"])
def test_a_result_that_cannot_be_shown_is_named_by_its_type(queue, log, concurrency, kind):
    job_id = queue.add(X, "unshowable", {"log": log, "kind": kind}, now=NOW)
    queue.add(H, "record", {"log": log, "n": "after"}, now=NOW)

    report = queue.run(now=NOW, concurrency=concurrency)

    assert (report.succeeded, report.failed) == (2, 0)
    view = queue.show(job_id)
    assert view["status"] == "success"  # its work is done: a retry would do it again
    assert view["message"].startswith("<a ") and view["message"].endswith("cannot be shown>")
    assert sorted(read_log(log)) == ["after", f"unshowable {kind}"]


API_RUN = """
import sys
import delayq
q = delayq.connect(database_url=sys.argv[1], redis_url=sys.argv[2],
                   handlers=["tests.sample_handlers"])
q.run()
"""


def test_a_real_sigint_still_stops_an_api_run_and_hands_the_job_back(queue, log, backend):
    # No graceful stop listens in a plain API run: SIGINT stops it, it does not fail the job.
    job_id = queue.add(H, "slow", {"log": log, "n": "current", "seconds": 30})
    run = subprocess.Popen(
        [sys.executable, "-c", API_RUN, backend["database_url"], backend["redis_url"]],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        # Python keeps SIGINT ignored if it starts so, as under a shell's background job.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    wait_for(lambda: read_log(log) == ["start current"], 30, "the job to start")
    run.send_signal(signal.SIGINT)

    _, stderr = run.communicate(timeout=30)
    assert run.returncode != 0
    assert b"Interrupt" in stderr.splitlines()[-1]  # KeyboardInterrupt, or its subclass
    assert queue.show(job_id)["status"] == "pending"
    assert _retries_of(job_id) == []


def nested(levels: int) -> object:
    data: list[object] = []
    for _ in range(levels - 1):
        data = [data]
    return data


@pytest.mark.parametrize("levels", [101, 30_000])
def test_data_nested_too_deeply_is_refused_at_add_and_nothing_is_written(queue, log, levels):
    with pytest.raises(BadInput, match="more than 100 levels deep"):
        queue.add(H, "echo", nested(levels))
    with pytest.raises(BadInput, match="more than 100 levels deep"):
        queue.add_many([JobSpec(H, "echo", 1), JobSpec(H, "echo", nested(levels))])

    assert Job.select().count() == 0
    assert queue.index.schedule.size("default") == 0
    queue.add(H, "echo", nested(100))  # the limit itself is fine
    assert Job.select().count() == 1


@MODES
@pytest.mark.parametrize("levels", [101, 30_000])
def test_a_row_with_data_nested_too_deeply_fails_for_good_and_the_run_goes_on(
    queue, log, concurrency, levels
):
    # Written by other code, which no check at add protects.
    data = "[" * levels + "]" * levels
    params = f'{{"class": "{H}", "method": "echo", "data": {data}}}'
    job_id = Job.insert(params=params, run_at=NOW).execute()
    queue.index.schedule.add("default", job_id, NOW)
    after = queue.add(H, "record", {"log": log, "n": "after"}, now=NOW)

    report = queue.run(now=NOW, concurrency=concurrency)

    assert (report.succeeded, report.failed, report.retried) == (1, 1, 0)
    view = queue.show(job_id)
    assert view["status"] == "failed"
    assert view["message"] == "bad params: data nests lists and objects more than 100 levels deep"
    assert _retries_of(job_id) == []
    assert queue.show(after)["status"] == "success"


@pytest.mark.parametrize("args", [[], ["--concurrency", "2"]], ids=["one-at-a-time", "pool"])
def test_delayq_run_goes_on_past_a_handler_raising_keyboardinterrupt(queue, cli_env, log, args):
    # `delayq run` routes SIGINT to its graceful stop: a KeyboardInterrupt is the handler's own.
    raising = [
        queue.add(X, method, {"log": log, "raise": "KeyboardInterrupt"})
        for method in ("raise_", "raise_async")
    ]
    after = queue.add(H, "record", {"log": log, "n": "after"})

    done = subprocess.run([*DELAYQ, "run", *args], env=cli_env, capture_output=True, timeout=60)

    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert [queue.show(job_id)["status"] for job_id in raising] == ["failed", "failed"]
    assert all(len(_retries_of(job_id)) == 1 for job_id in raising)
    assert queue.show(after)["status"] == "success"
