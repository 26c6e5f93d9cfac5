"""The per-job time limit: one interval timer for the whole run, re-armed only when needed,
must still stop each job at its own deadline and never fire between jobs; the same timer
ends a stop's grace for a job still running on the main thread."""

from __future__ import annotations

import signal
import time

import pytest

from delayq.base import threads
from delayq.store.table.model import Job, Status
from delayq.worker import interrupts
from delayq.worker.interrupts import JobTimeout
from tests.faults.test_processes import delayq, start
from tests.sample_handlers.jobs import read_log
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"


def _job(limit: float, runs_for: float) -> str:
    """Run a 'handler' that sleeps `runs_for` under `limit`; how it ended."""
    interrupts.arm(limit)
    try:
        time.sleep(runs_for)
    except JobTimeout:
        return "timed out"
    finally:
        interrupts.disarm()
    return "done"


def timer_is_off() -> bool:
    """Whether the interval timer has fired (or was never set): its handler has run, or runs
    before the next line of the test."""
    return signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_job_is_stopped_at_its_limit() -> None:
    with interrupts.time_limits() as enabled:
        assert enabled
        started = time.monotonic()
        assert _job(0.2, 5) == "timed out"
        assert 0.2 <= time.monotonic() - started < 1.0


def test_a_longer_limit_after_a_shorter_one_is_not_cut_short() -> None:
    # The timer still set for the first job fires during the second: it must re-arm.
    with interrupts.time_limits():
        assert _job(0.2, 0) == "done"
        assert _job(1.0, 0.5) == "done"
        started = time.monotonic()
        assert _job(0.4, 5) == "timed out"
        assert 0.4 <= time.monotonic() - started < 1.2


def test_a_shorter_limit_after_a_longer_one_applies() -> None:
    with interrupts.time_limits():
        assert _job(30, 0) == "done"
        started = time.monotonic()
        assert _job(0.2, 5) == "timed out"
        assert time.monotonic() - started < 1.0


def test_a_timer_left_from_a_finished_job_fires_harmlessly_between_jobs() -> None:
    with interrupts.time_limits():
        assert _job(0.1, 0) == "done"
        wait_for(timer_is_off, 5, "the stale timer to fire")  # between jobs: it must not raise
        assert _job(0.5, 0.1) == "done"


def test_many_jobs_cost_no_timer_call_each(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = interrupts.signal.setitimer
    with interrupts.time_limits():
        monkeypatch.setattr(
            interrupts.signal, "setitimer", lambda *args: calls.append(args) or real(*args)
        )
        for _ in range(1000):
            assert _job(30, 0) == "done"
    assert len(calls) <= 2  # armed once, cleared once at the end


def test_helper_threads_leave_the_run_signals_to_the_main_thread(tmp_path) -> None:
    # Delivered to a helper thread, SIGALRM would not wake a main thread asleep in a hung
    # handler, and its time limit would never fire.
    from peewee import SqliteDatabase

    from delayq.store.table.model import Table
    from delayq.worker.bookkeeper import Bookkeeper

    bookkeeper = Bookkeeper(Table(SqliteDatabase(str(tmp_path / "unused.db"))))
    try:
        blocked = bookkeeper.submit(signal.pthread_sigmask, signal.SIG_BLOCK, []).result()
    finally:
        bookkeeper.close()
    assert blocked >= threads.MAIN_THREAD_SIGNALS
    assert signal.SIGALRM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_a_stop_abandons_the_job_still_running_when_its_grace_ends() -> None:
    stop = interrupts.GracefulStop()
    with interrupts.time_limits(), interrupts.grace_on_alarm(stop, 0.2):
        interrupts.arm(30)
        started = time.monotonic()
        with pytest.raises(interrupts.Abandoned):
            stop.request(signal.SIGTERM)
            time.sleep(10)
        interrupts.disarm()
    assert time.monotonic() - started < 5


def test_a_job_that_ends_within_the_grace_is_not_abandoned_after_it() -> None:
    stop = interrupts.GracefulStop()
    with interrupts.time_limits(), interrupts.grace_on_alarm(stop, 0.2):
        assert _job(30, 0.05) == "done"  # a job before the stop
        interrupts.arm(30)
        stop.request(signal.SIGTERM)
        time.sleep(0.05)  # the job's own run, shorter than the grace: the behaviour under test
        interrupts.disarm()
        wait_for(timer_is_off, 5, "the grace to end")  # between jobs: nothing is raised
    assert stop.grace is None


def test_a_time_limit_shorter_than_the_grace_still_times_the_job_out() -> None:
    stop = interrupts.GracefulStop()
    with interrupts.time_limits(), interrupts.grace_on_alarm(stop, 5):
        interrupts.arm(0.1)
        try:
            with pytest.raises(JobTimeout):
                stop.request(signal.SIGTERM)
                time.sleep(3)
        finally:
            interrupts.disarm()


@pytest.mark.parametrize("loop", [[], ["--loop"]], ids=["once", "loop"])
def test_sigterm_hands_back_a_job_running_past_the_grace_and_exits_at_once(
    queue, cli_env, log, tmp_path, loop
):
    gate = tmp_path / "gate"
    long = queue.add(
        H, "gated", {"log": log, "n": "long", "gate": str(gate), "seconds": 10}, now=time.time() - 5
    )
    rest = [queue.add(H, "record", {"log": log, "n": n}) for n in range(2)]
    runner = start(cli_env, "run", "--grace", "1s", *loop)
    wait_for(lambda: read_log(log) == ["start long"], 30, "the long job to start")

    signalled = time.monotonic()
    runner.send_signal(signal.SIGTERM)

    assert runner.wait(timeout=30) == 128 + signal.SIGTERM
    assert time.monotonic() - signalled < 6  # the grace and an exit, not the 10 s job
    assert read_log(log) == ["start long"]  # interrupted, not run to its end
    row = Job.get_by_id(long)
    assert (row.status, row.lease_token, row.lost_leases) == (Status.PENDING, None, 0)
    assert [queue.show(job_id)["status"] for job_id in rest] == ["pending"] * 2
    assert queue.index.schedule.size("default") == 3  # back at once, not after the lease
    gate.touch()
    assert delayq(cli_env, "run").returncode == 0
    assert queue.show(long)["status"] == "success"
    assert sorted(read_log(log)) == ["0", "1", "done long", "start long", "start long"]
