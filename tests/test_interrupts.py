"""The per-job time limit: one interval timer for the whole run, re-armed only when needed,
must still stop each job at its own deadline and never fire between jobs."""

from __future__ import annotations

import signal
import time

import pytest

from delayq import threads
from delayq.worker import interrupts
from delayq.worker.interrupts import JobTimeout


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
        time.sleep(0.3)  # no job runs: the stale timer fires and must not raise
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

    from delayq.store.table import Table
    from delayq.worker.bookkeeper import Bookkeeper

    bookkeeper = Bookkeeper(Table(SqliteDatabase(str(tmp_path / "unused.db"))))
    try:
        blocked = bookkeeper.submit(signal.pthread_sigmask, signal.SIG_BLOCK, []).result()
    finally:
        bookkeeper.close()
    assert blocked >= threads.MAIN_THREAD_SIGNALS
    assert signal.SIGALRM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
