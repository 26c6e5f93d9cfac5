"""What `delayq status` says of the last run when it was a `run --loop`: one run that started
once, beats while it runs, and counts every job it ran; "stopped early" only for a pass a
limit stopped."""

from __future__ import annotations

import json
import signal
import time

from delayq.store.index.keys import LAST_RUN_KEY
from tests.faults.test_processes import start
from tests.support.invoke import invoke
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"


def last_run(cli_env: dict[str, str]) -> dict[str, object]:
    result = invoke(cli_env, "status", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["last_run"]


def status_line(cli_env: dict[str, str]) -> str:
    return invoke(cli_env, "status").stdout.splitlines()[0]


def test_a_loop_that_ran_its_time_is_one_run_with_all_its_jobs(queue, cli_env, log):
    for n in range(3):
        queue.add(H, "record", {"log": log, "n": n})
    before = time.time()

    ran = invoke(cli_env, "run", "--loop", "--for", "2s")

    assert ran.exit_code == 0, ran.output
    last = last_run(cli_env)
    assert (last["loop"], last["outcome"], last["jobs"]) == (True, "ok", 3)
    assert before - 1 <= last["started_at"] <= before + 1
    assert 1.5 <= last["duration"] < 30
    assert last["beat_at"] == last["started_at"] + last["duration"]
    line = status_line(cli_env)
    assert line.startswith("last run: a loop started ")
    assert ", last beat " in line and line.endswith(", ok, 3 jobs since it started")
    assert "stopped early" not in line and "took" not in line


def test_a_running_loop_beats_and_counts_its_jobs_as_it_goes(queue, cli_env, log):
    process = start(cli_env, "run", "--loop")
    wait_for(lambda: queue.index.client.exists(LAST_RUN_KEY), 30, "the loop to note itself")
    first = last_run(cli_env)
    assert (first["loop"], first["outcome"]) == (True, "running")

    for n in range(2):
        queue.add(H, "record", {"log": log, "n": n})
    wait_for(lambda: last_run(cli_env)["jobs"] == 2, 30, "the loop to count its two jobs")
    wait_for(lambda: last_run(cli_env)["beat_at"] >= first["beat_at"] + 1, 30, "a later beat")
    beating = last_run(cli_env)
    assert beating["started_at"] == first["started_at"]
    assert beating["age"] < 10
    assert status_line(cli_env).endswith(", running, 2 jobs since it started")

    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 128 + signal.SIGTERM
    ended = last_run(cli_env)
    assert (ended["outcome"], ended["jobs"]) == ("interrupted by SIGTERM", 2)


def test_a_loop_beats_at_most_about_once_a_second(queue, log):
    # --limit 1: each pass runs one job and the next follows at once, a pass a few ms.
    for n in range(40):
        queue.add(H, "record", {"log": log, "n": n})
    writes: list[float] = []
    registry = queue.index.registry
    record = registry.record_run

    def counted(*args: object, **kwargs: object) -> None:
        writes.append(time.monotonic())
        record(*args, **kwargs)  # type: ignore[arg-type]

    registry.record_run = counted  # type: ignore[method-assign]
    report = queue.run_loop(duration=2.5, limit=1)

    beats = writes[1:-1]  # between the one at its start and the one at its end
    assert report.ran > 6
    assert len(writes) <= 6, writes
    assert all(later - earlier >= 0.99 for earlier, later in zip(beats, beats[1:], strict=False))


def test_a_pass_stopped_by_limit_still_says_so_and_counts_its_jobs(queue, cli_env, log):
    for n in range(3):
        queue.add(H, "record", {"log": log, "n": n})

    assert invoke(cli_env, "run", "--limit", "2").exit_code == 0

    last = last_run(cli_env)
    assert (last["loop"], last["outcome"], last["jobs"]) == (
        False,
        "stopped early (--limit or --max-seconds)",
        2,
    )
    assert ", took " in status_line(cli_env)
