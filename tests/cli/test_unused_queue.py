"""`delayq run --queue NAME` for a queue no job has used yet (a typo, or a queue whose
producers start later): one warning line, the run goes on, and `status` lists the queue it
serves, with zero counts, so the mistake shows where an operator looks."""

from __future__ import annotations

import json
import time

from delayq.store.index.keys import schedule_key
from tests.support.invoke import invoke

H = "tests.sample_handlers.jobs"


def test_a_queue_no_job_has_used_is_one_warning_and_the_run_goes_on(queue, cli_env, log):
    job_id = queue.add(H, "record", {"log": log}, queue="mail")

    result = invoke(cli_env, "run", "--queue", "mail", "--queue", "nosuch")

    assert (result.exit_code, result.stdout) == (0, "")
    assert result.stderr == (
        "delayq: warning: no job has used queue 'nosuch' yet; serving it (check the name: "
        "jobs added to it from now on will run)\n"
    )
    assert queue.show(job_id)["status"] == "success"


def test_the_warning_is_given_once(queue, cli_env):
    assert invoke(cli_env, "run", "--queue", "nosuch").stderr != ""

    again = invoke(cli_env, "run", "--queue", "nosuch")

    assert (again.exit_code, again.stderr) == (0, "")


def test_status_lists_a_served_queue_with_zero_counts(queue, cli_env):
    invoke(cli_env, "run", "--queue", "nosuch")

    body = json.loads(invoke(cli_env, "status", "--json").stdout)
    table = invoke(cli_env, "status").stdout

    assert body["queues"]["nosuch"]["pending"] == 0
    assert body["queues"]["nosuch"]["success"] == 0
    assert any(line.split()[:2] == ["nosuch", "0"] for line in table.splitlines())


def test_known_queues_are_served_without_a_word(queue, cli_env, log):
    queue.add(H, "record", {"log": log}, queue="mail")
    # A producer of its own that scheduled a job without registering its queue.
    queue.index.client.zadd(schedule_key("sms"), {"999999": time.time() + 3600})

    for args in (["--queue", "mail"], ["--queue", "default"], ["--queue", "sms"], []):
        result = invoke(cli_env, "run", *args)
        assert (result.exit_code, result.stderr) == (0, ""), args


def test_weighted_queues_are_checked_too(queue, cli_env):
    result = invoke(cli_env, "run", "--queues", "default:3,nosuch:1")

    assert result.exit_code == 0
    assert "queue 'nosuch'" in result.stderr
