"""A run that finds the table on another MySQL server than the one noted in Redis (a replica
promoted in place of its primary) says once, in one line, which ids the schedule and the
journal know that the table lacks, raises AUTO_INCREMENT above them, and doctor shows it.
On the suite's one server the failover is played by rewriting the note;
tests/faults/test_mysql_failover.py fails over real servers."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from delayq.store.index.keys import DATABASE_SERVER_KEY
from delayq.store.table.primaries import Primaries
from tests.conftest import DELAYQ

H = "tests.sample_handlers.jobs"
LOST = 900_000  # an id the old primary gave a job its replica never had

pytestmark = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)


def run(cli_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DELAYQ, *args], env=cli_env, capture_output=True, text=True, timeout=60)


def test_the_first_run_on_another_server_says_what_the_failover_took_once(queue, cli_env, log):
    queue.add(H, "record", {"log": log, "n": "kept"}, delay="1h")
    queue.index.schedule.add("default", LOST, time.time() + 600)
    queue.index.journal.write("default", LOST + 1, "an outcome of a job the table lacks")
    queue.index.client.set(DATABASE_SERVER_KEY, "old-primary:3306/1")

    first, second = run(cli_env, "run"), run(cli_env, "run")

    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    (said,) = first.stderr.splitlines()
    assert (
        f"({Primaries(queue.table).server_identity()}, was old-primary:3306/1: a failover?)" in said
    )
    assert f"; 2 jobs the schedule or the journal knows have no row there (ids {LOST}, " in said
    assert f"{LOST + 1}, due " in said
    assert second.stderr == ""  # said once
    assert queue.add(H, "record", {"log": log, "n": "new"}) > LOST + 1
    doctor = json.loads(run(cli_env, "doctor", "--json").stdout)
    (failover,) = [check for check in doctor["checks"] if check["name"] == "failover"]
    assert failover["level"] == "warn" and said.split("WARNING ", 1)[-1] in failover["detail"]


def test_a_run_on_the_server_it_noted_says_nothing_and_doctor_has_no_failover_line(queue, cli_env):
    assert run(cli_env, "run").stderr == ""  # notes the server
    assert run(cli_env, "run").stderr == ""

    doctor = json.loads(run(cli_env, "doctor", "--json").stdout)
    assert "failover" not in {check["name"] for check in doctor["checks"]}
